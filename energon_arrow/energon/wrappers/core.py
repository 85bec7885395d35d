"""The core sample dataset of one split for one worker, over the loader's index (energon's built webdataset).

Worker k of the rank reads the contiguous rows `worker_offsets(...)[k:k + 2]` of the split table (energon's
ranges). Validation (`training=False`) yields them once in index order; training repeats them forever, each
epoch in a fresh order of blocks of `max_samples_per_sequence` consecutive samples of a shard (the loader's
`EpochOrder`, seeded by the worker's seed and the epoch). Samples are read a chunk at a time (one planned read
per chunk) and built by the loader's `SampleBuilder`, so they carry the same fields, keys, subflavors and
sources as the batched loader's. The state is (epoch, position within the epoch): two integers.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from energon_arrow.energon.energon_len import slice_offsets
from energon_arrow.energon.wrappers.base import (
    SavableDataset,
    rank_worker_id,
    worker_config_dict,
    worker_seed,
)
from energon_arrow.energon.wrappers.slicing import worker_offsets
from energon_arrow.loader.assemble import located_samples, sample_parts
from energon_arrow.loader.batch_columns import SourceColumns
from energon_arrow.loader.builder import SampleBuilder
from energon_arrow.loader.errors import LoaderError
from energon_arrow.loader.order import BlockLayout, EpochOrder
from energon_arrow.loader.reader import SampleReader
from energon_arrow.loader.source import SplitSource

READ_CHUNK = 32  # samples planned and read together


class WorkerSlices:
    """energon's sample-loader stage of one dataset as code walking energon's pipeline (`ds.dataset...`) sees it:
    `workers_slice_offsets` (per worker of the rank, its sequence boundaries: energon's split, cut at shard
    boundaries and every `max_samples_per_sequence` samples) and `len()` (the rank's samples), both in energon's
    index space (`offsets` there: it counts the samples split.yaml excludes one by one, SplitSource.excluded)."""

    def __init__(self, source: SplitSource, offsets: list[int], max_samples_per_sequence: int | None):
        bounds = source.energon_shard_bounds()
        self.workers_slice_offsets = [
            slice_offsets(a, b, bounds, max_samples_per_sequence) for a, b in zip(offsets, offsets[1:])
        ]

    def __len__(self) -> int:
        return sum(o[-1] - o[0] for o in self.workers_slice_offsets)


class SampleDataset(SavableDataset):
    """The samples of one split for the current worker (see the module docstring)."""

    _savable_fields = ("_epoch", "_position")

    def __init__(
        self,
        source: SplitSource,
        builder: SampleBuilder,
        *,
        worker_config,
        training: bool,
        max_samples_per_sequence: int | None = None,
        worker_rotation_offset: int = 0,
    ):
        super().__init__(worker_config)
        if max_samples_per_sequence is not None and max_samples_per_sequence < 1:
            raise LoaderError(
                f"max_samples_per_sequence must be >= 1 or None, got {max_samples_per_sequence}"
            )
        self.source, self.builder = source, builder
        self.training = training
        self.max_samples_per_sequence = max_samples_per_sequence
        self.offsets = worker_offsets(
            0,
            len(source),
            worker_config.rank,
            worker_config.world_size,
            worker_config.num_workers,
            worker_rotation_offset,
        )
        self._layout: tuple[int, BlockLayout] | None = None
        self._order: EpochOrder | None = None
        self._reader: SampleReader | None = None
        self._columns: SourceColumns | None = None  # per-chunk index gathers (made on first use, per process)
        self._shard_rows: dict[int, tuple[int, int]] | None = None
        self._energon_offsets = self.offsets
        if source.has_excluded():  # energon's split of its index space, for `dataset`
            wc = worker_config
            self._energon_offsets = worker_offsets(
                0, source.energon_len(), wc.rank, wc.world_size, wc.num_workers, worker_rotation_offset
            )
        self.reset_state_own()

    @property
    def dataset(self) -> WorkerSlices:
        """energon's sample-loader stage under this one (see WorkerSlices)."""
        return WorkerSlices(self.source, self._energon_offsets, self.max_samples_per_sequence)

    def reset_state_own(self) -> None:
        self._epoch = 0
        self._position = 0

    def _range(self, worker_idx: int | None = None) -> tuple[int, int]:
        k = rank_worker_id(self.worker_config) if worker_idx is None else worker_idx
        return self.offsets[k], self.offsets[k + 1]

    def len_worker(self, worker_idx: int | None = None) -> int:
        lo, hi = self._range(worker_idx)
        return hi - lo

    def worker_has_samples(self) -> bool:
        return self.len_worker() > 0

    # ---- order ---------------------------------------------------------------------------------------------
    def _epoch_rows(self, lo: int, hi: int, positions: np.ndarray) -> np.ndarray:
        """Table rows at `positions` of the current epoch of the worker's rows [lo, hi)."""
        if not self.training:
            return lo + positions
        if self._layout is None or self._layout[0] != lo:
            block = self.max_samples_per_sequence or max(1, hi - lo)
            self._layout = (lo, BlockLayout.from_runs(*self.source.shard_runs(lo, hi), block))
            self._order = None
        if self._order is None or self._order.epoch != self._epoch:
            seed = worker_seed(self.worker_config) & 0xFFFFFFFF
            self._order = EpochOrder(
                self._layout[1], seed, self._epoch, in_order=self.max_samples_per_sequence is None
            )
        return lo + self._order.rows_at(positions)

    def __iter__(self) -> Iterator[Any]:
        lo, hi = self._range()
        n = hi - lo
        if n == 0:
            return
        if self._reader is None:
            self._reader = SampleReader(self.source)
        while True:
            while self._position < n:
                positions = np.arange(self._position, min(n, self._position + READ_CHUNK), dtype=np.int64)
                rows = self._epoch_rows(lo, hi, positions)
                views = self._reader.read(rows)
                if self._columns is None:
                    self._columns = SourceColumns(self.source)
                located = located_samples(self._columns, rows, views)  # None: no part layout in the index
                for j, (row, view) in enumerate(zip(rows.tolist(), views)):
                    sample = self.builder.build(*located[j], row) if located else self._build(row, view)
                    self._position += 1
                    yield sample
            self._position = 0
            self._epoch += 1
            if not self.training:
                self._epoch = 0
                return

    def _build(self, row: int, view) -> Any:
        src = self.source
        key, parts = sample_parts(src, row, view)
        shard = src.shard_paths[src.shard_id[row]]
        return self.builder.build(key, parts, shard, int(src.sample_index[row]), row)

    # ---- random access -------------------------------------------------------------------------------------
    def can_restore_sample(self) -> bool:
        return True

    def assert_can_restore(self) -> None:
        return None

    def _row_of(self, shard: str, sample_index: int) -> int:
        src = self.source
        if self._shard_rows is None:
            starts, lengths = src.shard_runs()
            sid = src.shard_id[starts]
            self._shard_rows = {int(i): (int(s), int(s + n)) for i, s, n in zip(sid, starts, lengths)}
            self._shard_ids = {p: i for i, p in enumerate(src.shard_paths)}
        sid = self._shard_ids.get(shard)
        span = self._shard_rows.get(sid) if sid is not None else None
        if span is not None:
            lo, hi = span
            j = lo + int(np.searchsorted(np.asarray(src.sample_index[lo:hi]), sample_index))
            if j < hi and int(src.sample_index[j]) == sample_index:
                return j
        raise LoaderError(
            f"{src.name}: no sample {sample_index} of shard {shard!r} in this split (restore key)"
        )

    def restore_sample(self, restore_key: tuple) -> Any:
        if len(restore_key) != 3 or restore_key[0] != "Webdataset":
            raise LoaderError(f"{self.source.name}: not a sample restore key: {restore_key!r}")
        row = self._row_of(restore_key[1], int(restore_key[2]))
        if self._reader is None:
            self._reader = SampleReader(self.source)
        return self._build(row, self._reader.read(np.array([row], np.int64))[0])

    def config(self) -> dict:
        return {
            "type": type(self).__qualname__,
            "dataset": self.source.name,
            "samples": len(self.source),
            "training": self.training,
            "max_samples_per_sequence": self.max_samples_per_sequence,
            "worker_config": worker_config_dict(self.worker_config),
        }

    def __str__(self) -> str:
        return f"SampleDataset({self.source.name}, training={self.training})"

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_reader"] = None  # open file handles stay in their process
        state["_columns"] = None
        return state
