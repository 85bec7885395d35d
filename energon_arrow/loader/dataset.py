"""`BatchDataset`: a torch IterableDataset that yields this rank's batches, split over DataLoader workers.

Each item is `(global_batch_index, skipped_samples, batch)`; the `Loader` unpacks it, checks the order and keeps
the resume state. Worker k of K produces global batches start + k, start + k + K, ... so the DataLoader's
round-robin hands them out in global order whatever K is.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from energon_arrow.loader.builder import SampleBuilder
from energon_arrow.loader.errors import ErrorBudgetExceeded, LoaderError
from energon_arrow.loader.members import split_sample
from energon_arrow.loader.order import EpochCache
from energon_arrow.loader.schedule import BatchSchedule
from energon_arrow.loader.source import SplitSource
from energon_arrow.samples.decoders import PartDecoder
from energon_arrow.samples.types import batch_samples


@dataclass
class LoaderSettings:
    """Everything that decides the batch sequence (plus how errors and reads are handled)."""

    global_batch_size: int
    seed: int = 0
    shuffle: bool = True
    repeat: bool = True
    block_size: int = (
        16  # consecutive samples of one shard kept together (energon's max_samples_per_sequence)
    )
    shuffle_buffer: int = 0
    skip_errors: bool = False  # skip samples whose parts fail to decode (counted) instead of raising
    error_budget: int = 100  # with skip_errors: raise once more samples than this were skipped (per worker)
    read_ahead: int | None = None  # batches fetched ahead in a thread; default 2 on object stores, 0 locally

    def fingerprint(self) -> dict:
        return {
            "global_batch_size": self.global_batch_size,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "repeat": self.repeat,
            "block_size": self.block_size,
            "shuffle_buffer": self.shuffle_buffer,
        }


class TaskHooks:
    """The task-encoder steps the loader calls (energon's names): cook, encode_sample, batch, encode_batch."""

    def __init__(self, task_encoder: Any = None):
        self.te = task_encoder
        self.cookers = list(getattr(task_encoder, "cookers", ()) or ())

    def sample(self, sample: Any, position_seed: int) -> list:
        if self.te is None:
            return [sample]
        from energon_arrow.samples.cookers import select_cooker

        if isinstance(sample, dict) and self.cookers:
            cooker = select_cooker(self.cookers, sample.get("__subflavors__"), repr(sample.get("__key__")))
            sample = cooker.cook(sample)
        fn = self.te.encode_sample
        if getattr(fn, "__restore_seeds__", False):
            random.seed(position_seed)
            np.random.seed(position_seed & 0xFFFFFFFF)
            torch.manual_seed(position_seed)
        out = fn(sample)
        if out is None:
            return []
        if hasattr(out, "__next__"):
            return list(out)
        return [out]

    def batch(self, samples: list) -> Any:
        if self.te is None:
            return batch_samples(samples)
        return self.te.encode_batch(self.te.batch(samples))


class BatchDataset(torch.utils.data.IterableDataset):
    """Batches of one rank. `sources`: split tables; `weights`: blend weights (None = concatenate in order)."""

    def __init__(
        self,
        sources: list[SplitSource],
        settings: LoaderSettings,
        rank: int = 0,
        world_size: int = 1,
        weights: list[float] | None = None,
        decoder: PartDecoder | None = None,
        task_encoder: Any = None,
        trust_remote_code: bool = False,
    ):
        if not sources:
            raise LoaderError("no datasets to load")
        if settings.global_batch_size % world_size:
            raise LoaderError(
                f"global batch size {settings.global_batch_size} is not divisible by world size {world_size}"
            )
        if not 0 <= rank < world_size:
            raise LoaderError(f"rank {rank} out of range for world size {world_size}")
        empty = [s.name for s in sources if len(s) == 0]
        if empty and settings.repeat:
            raise LoaderError(f"split has no samples: {empty}")
        self.sources = sources
        self.settings = settings
        self.rank, self.world_size = rank, world_size
        self.local_batch_size = settings.global_batch_size // world_size
        self.decoder = decoder if decoder is not None else PartDecoder()
        self.hooks = TaskHooks(task_encoder)
        self.schedule = BatchSchedule(
            [len(s) for s in sources], settings.global_batch_size, settings.seed, weights
        )
        self.limit = None if settings.repeat else int(sum(len(s) for s in sources))
        self.builders = [
            SampleBuilder(s.storage, s.config, self.decoder, s.subflavors, trust_remote_code) for s in sources
        ]
        self.start_batch = 0
        self.num_workers = 1

    # ---- plan --------------------------------------------------------------------------------------------
    def total_batches(self) -> int | None:
        """Global batches in the stream (None when it repeats forever)."""
        if self.limit is None:
            return None
        return -(-self.limit // self.settings.global_batch_size)

    def _caches(self) -> list[EpochCache]:
        s = self.settings
        return [
            EpochCache(src.shard_id, s.seed + 7919 * i, s.block_size, s.shuffle_buffer, s.shuffle)
            for i, src in enumerate(self.sources)
        ]

    def plan(self, b: int, caches: list[EpochCache]) -> list[tuple[int, int]]:
        """(source, table row) of every sample of this rank's slice of global batch b, in batch order."""
        lo = self.rank * self.local_batch_size
        owner, pos = self.schedule.slots(b, lo, lo + self.local_batch_size, self.limit)
        rows = np.empty(len(pos), np.int64)
        for d in np.unique(owner):
            m = owner == d
            rows[m] = caches[d].rows_at(pos[m])
        return list(zip(owner.tolist(), rows.tolist()))

    # ---- reading -----------------------------------------------------------------------------------------
    def _fetch(self, plan: list[tuple[int, int]]) -> list[memoryview]:
        out: list[memoryview | None] = [None] * len(plan)
        by_source: dict[int, list[int]] = {}
        for i, (d, _) in enumerate(plan):
            by_source.setdefault(d, []).append(i)
        for d, idx in by_source.items():
            src = self.sources[d]
            rows = np.asarray([plan[i][1] for i in idx], np.int64)
            rels = [src.shard_paths[s] for s in src.shard_id[rows].tolist()]
            views = src.storage.read_ranges(rels, src.byte_offset[rows], src.byte_size[rows])
            for i, v in zip(idx, views):
                out[i] = v
        return out  # type: ignore[return-value]

    def _worker_slot(self) -> tuple[int, int]:
        info = torch.utils.data.get_worker_info()
        k, n = (0, 1) if info is None else (info.id, info.num_workers)
        return k, n

    def __iter__(self) -> Iterator[tuple[int, int, Any]]:
        k, n = self._worker_slot()
        caches = self._caches()
        total = self.total_batches()
        remote = any(not s.storage.is_local for s in self.sources)
        ahead = self.settings.read_ahead if self.settings.read_ahead is not None else (2 if remote else 0)

        def batch_ids() -> Iterator[int]:
            b = self.start_batch + k
            while total is None or b < total:
                yield b
                b += n

        skipped = 0
        pool = ThreadPoolExecutor(1) if ahead > 0 else None
        try:
            pending: list = []
            ids = batch_ids()
            while True:
                while len(pending) <= ahead:
                    b = next(ids, None)
                    if b is None:
                        break
                    plan = self.plan(b, caches)
                    fut = pool.submit(self._fetch, plan) if pool else None
                    pending.append((b, plan, fut))
                if not pending:
                    return
                b, plan, fut = pending.pop(0)
                if not plan:
                    continue
                views = fut.result() if fut is not None else self._fetch(plan)
                samples, skipped = self._build(b, plan, views, skipped)
                if samples:
                    yield b, skipped, self.hooks.batch(samples)
        finally:
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)

    def _build(self, b: int, plan, views, skipped: int) -> tuple[list, int]:
        from energon_arrow.loader.errors import DecodeError, MissingPartError

        samples = []
        for slot, ((d, row), view) in enumerate(zip(plan, views)):
            src = self.sources[d]
            shard = src.shard_paths[src.shard_id[row]]
            try:
                key, parts = split_sample(view, f"{src.storage.url_of(shard)}@{int(src.byte_offset[row])}")
                if key is None:
                    raise LoaderError(
                        f"{src.storage.url_of(shard)}: no sample member at byte offset {int(src.byte_offset[row])} "
                        f"(stale index?)"
                    )
                sample = self.builders[d].build(key, parts, shard, int(src.sample_index[row]))
                samples.extend(self.hooks.sample(sample, self.settings.seed * 1_000_003 + b * 65_537 + slot))
            except (DecodeError, MissingPartError) as exc:
                if not self.settings.skip_errors:
                    raise
                skipped += 1
                if skipped > self.settings.error_budget:
                    raise ErrorBudgetExceeded(
                        f"{skipped} samples skipped, over the error budget of {self.settings.error_budget}; "
                        f"last: {exc}"
                    ) from exc
        return samples, skipped
