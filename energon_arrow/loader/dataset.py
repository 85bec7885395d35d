"""`BatchDataset`: a torch IterableDataset that yields this rank's batches, split over DataLoader workers.

Each item is `(global_batch_index, skipped_samples, batch, slot_leases)`; the `Loader` unpacks it, checks the
order, keeps the resume state and tracks the image slots the batch lives in (`image_slots`, see images/slots.py).
Worker k of K produces global batches start + k, start + k + K, ... so the DataLoader's round-robin hands them out
in global order whatever K is (a schedule with `reader_chunks(start, k, K)` chooses each worker's batches itself).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from energon_arrow.images.slots import SlotAllocator, SlotBoard
from energon_arrow.loader.assemble import Assembler
from energon_arrow.loader.epochized import EpochizedSchedule
from energon_arrow.loader.errors import LoaderError
from energon_arrow.loader.order import BlockLayout, EpochCache, combine_multipliers
from energon_arrow.loader.plan_ahead import PlanAhead
from energon_arrow.loader.reader import LOCAL_AHEAD, PLAN_AHEAD, SampleReader, open_readers
from energon_arrow.loader.sample_hooks import PlainHooks, SampleHooks
from energon_arrow.loader.schedule import BatchSchedule
from energon_arrow.loader.source import SplitSource
from energon_arrow.loader.verify_crc import resolve_verify
from energon_arrow.loader.worker_failure import failures_as_items
from energon_arrow.samples.decoders import PartDecoder

RELEASE_EVERY = 8  # batches between drops of the index pages a worker touched (SplitSource.release_pages)


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
    #: samples of a block in table order (energon's max_samples_per_sequence=None: sequences are read
    #: sequentially; only the blocks and the shuffle buffer mix them); False: permuted inside each block
    block_in_order: bool = False
    shuffle_buffer: int = 0
    #: energon's shuffle_over_epochs (when shuffling): k >= 1 a permutation spans k epochs, -1 blocks drawn with
    #: replacement, None no block shuffling (loader/order.py)
    shuffle_over_epochs: int | None = 1
    #: per source: a metadataset's shuffle_over_epochs_multiplier, combined with the one above (None: all 1)
    source_over_epochs: tuple | None = None
    drop_last: bool = False  # finite streams: drop the last, partial global batch
    #: a sample whose parts fail to decode (or that lacks a field-map part): None, as energon, goes to the
    #: worker config's global_error_handler and is skipped (fatal after 100 in a row); True skips and counts it;
    #: False raises
    skip_errors: bool | None = None
    error_budget: int = (
        100  # with skip_errors=True: raise once more samples than this were skipped (per worker)
    )
    #: batches read ahead in a thread (None or 0: none)
    read_ahead: int | None = None
    #: validation as energon (energon/worker_slices.py): the workers per rank whose slices decide the batches; None: the
    #: worker-count-invariant global batches
    slice_workers: int | None = None
    #: "crc": check every part read against the CRC32C prepare recorded (a mismatch is read again, then an error);
    #: "none": no check; None: the storage option `verify` / ENERGON_ARROW_VERIFY (default "none";
    #: loader/verify_crc.py)
    verify: str | None = None

    def fingerprint(self) -> dict:
        extra = {"shuffle_over_epochs": self.shuffle_over_epochs} if self.shuffle_over_epochs != 1 else {}
        if self.slice_workers is not None:
            extra["slice_workers"] = self.slice_workers
        if self.block_in_order:
            extra["block_in_order"] = True
        if self.source_over_epochs is not None and any(m != 1 for m in self.source_over_epochs):
            extra["source_over_epochs"] = list(self.source_over_epochs)
        return extra | {
            "global_batch_size": self.global_batch_size,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "repeat": self.repeat,
            "block_size": self.block_size,
            "shuffle_buffer": self.shuffle_buffer,
            "drop_last": self.drop_last,
        }


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
        hooks: SampleHooks | None = None,
        trust_remote_code: bool = False,
        repetitions: list[float] | None = None,
    ):
        """`repetitions`: blend_epochized repetitions per source (exclusive with `weights`): an epoch holds
        every sample of each whole repetition (see loader/epochized.py). `hooks`: what is called per sample and
        per batch (loader/sample_hooks.py; default `PlainHooks`, the energon layer passes its `TaskHooks`)."""
        if not sources:
            raise LoaderError("no datasets to load")
        if settings.global_batch_size % world_size:
            raise LoaderError(
                f"global batch size {settings.global_batch_size} is not divisible by world size {world_size}"
            )
        if not 0 <= rank < world_size:
            raise LoaderError(f"rank {rank} out of range for world size {world_size}")
        empty = [s.name for s in sources if len(s) == 0]
        if empty:  # energon: EmptyDatasetError, for training and validation alike
            raise LoaderError(f"split has no samples: {empty}")
        self.sources = sources
        self.weights, self.repetitions = weights, repetitions
        self.settings = settings
        self.rank, self.world_size = rank, world_size
        self.local_batch_size = settings.global_batch_size // world_size
        self.decoder = decoder if decoder is not None else PartDecoder()
        self.hooks = hooks if hooks is not None else PlainHooks()
        sizes = [len(s) for s in sources]
        self.over_epochs = _over_epochs(settings, len(sources))
        # positions of one full pass of each source's order: k epochs when shuffled over k epochs
        spans = [n * (k if k not in (None, -1) else 1) for n, k in zip(sizes, self.over_epochs)]
        if repetitions is not None:
            if weights is not None:
                raise LoaderError("blend weights and blend_epochized repetitions cannot be combined")
            endless = [
                s.name for s, k, r in zip(sources, self.over_epochs, repetitions) if k == -1 and r >= 1
            ]
            if endless:
                raise LoaderError(
                    f"blend_epochized: {endless}: shuffle_over_epochs_multiplier=-1 draws samples with "
                    "replacement without end, so a whole repetition never ends (energon's neither); use a "
                    "weighted blend, or repetitions < 1"
                )
            self.schedule = EpochizedSchedule(
                sizes, repetitions, settings.global_batch_size, settings.seed, pass_lengths=spans
            )
            epoch = self.schedule.epoch_length
        else:
            self.schedule = BatchSchedule(sizes, settings.global_batch_size, settings.seed, weights)
            epoch = int(sum(sizes))
            if any(k not in (1, None) for k in self.over_epochs):  # None keeps the single pass (no shuffling)
                if len(sources) > 1 and weights is None:
                    raise LoaderError(
                        f"shuffle_over_epochs_multiplier={self.over_epochs} is supported for one dataset, a "
                        "weighted blend or blend_epochized, not for concatenated datasets (their epochs are "
                        "counted in single passes)"
                    )
                # one dataset here (a weighted blend has no finite pass): a pass spans k epochs (-1: endless)
                epoch = None if self.over_epochs[0] == -1 else spans[0]
        self.limit = None if settings.repeat or epoch is None else epoch
        if self.limit is not None and settings.drop_last:
            self.limit -= self.limit % settings.global_batch_size
        self.verify = [resolve_verify(s, settings.verify) for s in sources]  # per source: reads checked
        self.builders = [s.new_builder(self.decoder, trust_remote_code) for s in sources]
        self.layouts = [BlockLayout.from_runs(*src.shard_runs(), settings.block_size) for src in sources]
        self.assembler = Assembler(sources, self.builders, self.hooks, settings)
        self.start_batch = 0
        self.image_slots: SlotBoard | None = None  # set by the Loader before its workers start
        self._warm: list[EpochCache] | None = None  # epoch state built before the workers fork (warm_plan)

    def config(self) -> dict:
        """What defines this rank's batches, as a nested dict (loader/loader_config.py)."""
        from energon_arrow.loader.loader_config import dataset_config

        return dataset_config(self)

    # ---- plan --------------------------------------------------------------------------------------------
    def total_batches(self) -> int | None:
        """Global batches in the stream (None when it repeats forever); with a rank's own schedule
        (energon/worker_slices.py, validation as energon) that rank's batches."""
        if self.limit is None:
            return None
        own = getattr(self.schedule, "rank_batches", None)
        if own is not None:
            return own
        return -(-self.limit // self.settings.global_batch_size)

    def rank_length(self) -> int | None:
        """Batches this rank yields in one finite pass (None when the stream repeats forever)."""
        total = self.total_batches()
        if total is None or getattr(self.schedule, "rank_batches", None) is not None:
            return total
        first = self.rank * self.local_batch_size
        return max(0, -(-(self.limit - first) // self.settings.global_batch_size))

    def _caches(self) -> list[EpochCache]:
        s = self.settings
        return [
            EpochCache(layout, s.seed + 7919 * i, s.shuffle_buffer, s.shuffle, over, s.block_in_order)
            for i, (layout, over) in enumerate(zip(self.layouts, self.over_epochs))
        ]

    def warm_plan(self) -> None:
        """Build the epoch state the first batch needs (O(blocks): the block permutation) before the DataLoader
        forks its workers: they inherit it as shared pages instead of each computing and holding a copy."""
        self._warm = self._caches()
        total = self.total_batches()
        if total is None or self.start_batch < total:
            self.plan(self.start_batch, self._warm)

    def plan(self, b: int, caches: list[EpochCache]) -> tuple[np.ndarray, np.ndarray]:
        """(source, table row) arrays of every sample of this rank's slice of global batch b, in batch order."""
        return self.plan_many([b], caches)[0]

    def plan_many(self, batches, caches: list[EpochCache]) -> list[tuple[np.ndarray, np.ndarray]]:
        """`plan` of several batches with one row lookup per source for all of them (the epoch order then
        computes each block's permutation once, not once per batch)."""
        lo = self.rank * self.local_batch_size
        slots = [self.schedule.slots(b, lo, lo + self.local_batch_size, self.limit) for b in batches]
        owner = np.concatenate([o for o, _ in slots])
        pos = np.concatenate([p for _, p in slots])
        if getattr(
            self.schedule, "gives_rows", False
        ):  # energon's per-worker order (energon/worker_slices.py)
            rows = pos
        elif len(self.sources) == 1:
            rows = caches[0].rows_at(pos)
        else:
            rows = np.empty(len(pos), np.int64)
            for d in np.unique(owner):
                m = owner == d
                rows[m] = caches[d].rows_at(pos[m])
        cuts = np.cumsum([len(p) for _, p in slots])[:-1]
        return list(zip(np.split(owner, cuts), np.split(rows, cuts)))

    # ---- reading -----------------------------------------------------------------------------------------
    def _announce(self, plan: tuple[np.ndarray, np.ndarray], readers: list[SampleReader]) -> None:
        """Tell each source's reader the rows it will be asked for (remote readers plan windows from them)."""
        owner, rows = plan
        if len(readers) == 1:
            readers[0].announce(rows)
            return
        for d in np.unique(owner).tolist():
            readers[d].announce(rows[owner == d])

    def _fetch(self, plan: tuple[np.ndarray, np.ndarray], readers: list[SampleReader]) -> list[memoryview]:
        owner, rows = plan
        if len(readers) == 1:
            return readers[0].read(rows)
        out: list[memoryview | None] = [None] * len(rows)
        for d in np.unique(owner).tolist():
            idx = np.flatnonzero(owner == d)
            for i, v in zip(idx.tolist(), readers[d].read(rows[idx])):
                out[i] = v
        return out  # type: ignore[return-value]

    def _worker_slot(self) -> tuple[int, int]:
        info = torch.utils.data.get_worker_info()
        k, n = (0, 1) if info is None else (info.id, info.num_workers)
        return k, n

    def __iter__(self) -> Iterator[tuple[int, int, Any, tuple, list]]:
        """(batch number, samples skipped so far, batch, slot leases, stream snapshots) of this worker's batches
        (the snapshots its schedule's streams took since the last batch, for the main process to keep:
        energon/train_stream.py); in a DataLoader worker an error ends the stream as a WorkerFailure
        item (loader/worker_failure.py)."""
        batches = self._worker_batches()
        if torch.utils.data.get_worker_info() is None:
            return batches
        return failures_as_items(batches, lambda failure: (-1, 0, failure, (), []))

    def _worker_batches(self) -> Iterator[tuple[int, int, Any, tuple, list]]:
        k, n = self._worker_slot()
        in_worker = torch.utils.data.get_worker_info() is not None
        slots = SlotAllocator(self.image_slots, k)
        self.assembler.slots = slots
        self.assembler.device_normalize = self.image_slots is not None and self.image_slots.device_normalize
        caches = self._warm if self._warm is not None else self._caches()
        total = self.total_batches()
        remote = any(not s.storage.is_local for s in self.sources)
        # no read-ahead thread by default: window readers fetch in the background already, and a thread that slices
        # the next batches out of their windows only added GIL hand-offs (S3 epoch: 0.03-0.05 CPU-s more than
        # local without it, 0.08-0.20 with 2 batches ahead; benchmarks.s3_cpu_threads, 3 alternating runs)
        ahead = self.settings.read_ahead or 0

        def batch_ids() -> Iterator[int]:
            if hasattr(self.schedule, "reader_chunks"):  # energon's order (energon/worker_slices.py)
                return self.schedule.reader_chunks(self.start_batch, k, n)
            first = self.start_batch + k
            return itertools.count(first, n) if total is None else iter(range(first, total, n))

        snapshots = getattr(self.schedule, "sent_snapshots", list)
        ids, own_total = batch_ids(), None
        if total is not None:  # a finite pass: this worker's batches known up front (readers plan to the end)
            ids = list(ids)
            ids, own_total = iter(ids), len(ids)
        # this worker's batches, planned 16 at a time, each once for the dataset and the readers planning ahead
        planner = PlanAhead(ids, lambda chunk: self.plan_many(chunk, caches), own_total)
        skipped = done = 0
        readers = open_readers(self, k, n, planner)
        horizon = max(ahead, PLAN_AHEAD if remote else LOCAL_AHEAD)  # batches announced to the readers ahead
        pool = ThreadPoolExecutor(1) if ahead > 0 else None
        try:
            pending: deque = deque()  # [b, plan, fetch future or None]
            while True:
                while len(pending) <= horizon:
                    item = planner.take()
                    if item is None:
                        break
                    b, plan = item
                    self._announce(plan, readers)
                    pending.append([b, plan, None])
                for item in itertools.islice(pending, ahead + 1) if pool else ():
                    if item[2] is None:
                        item[2] = pool.submit(self._fetch, item[1], readers)
                if not pending:
                    return
                b, plan, fut = pending.popleft()
                if not len(plan[1]):
                    continue
                views = fut.result() if fut is not None else self._fetch(plan, readers)
                batch, skipped = self.assembler.batch(b, plan, views, skipped)
                # every few batches: drop the index pages they touched (a bounded resident set; each call costs
                # a madvise per mapping and the next batches' page faults, so not after every batch)
                done += 1
                if done % RELEASE_EVERY == 0:
                    for src in self.sources:
                        src.release_pages()
                leases = slots.take()
                if batch is not None:
                    if leases and in_worker:  # the slots the main process maps already travel by reference
                        batch, leases = slots.sendable(batch, leases)
                    yield b, skipped, batch, leases, snapshots()
        finally:
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)
            for r in readers:
                r.close()


def _over_epochs(settings: LoaderSettings, n_sources: int) -> list:
    """Each source's shuffle_over_epochs (1 when not shuffling): the loader's argument combined with the
    metadataset's per-dataset multiplier (energon's rule, loader/order.py)."""
    over = settings.shuffle_over_epochs
    if over is not None and over != -1 and (isinstance(over, bool) or not isinstance(over, int) or over < 1):
        raise LoaderError(f"shuffle_over_epochs_multiplier must be >= 1, -1 or None, got {over!r}")
    if not settings.shuffle:
        return [1] * n_sources
    own = settings.source_over_epochs or (1,) * n_sources
    return [combine_multipliers(over, m) for m in own]
