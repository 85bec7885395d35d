"""Per-batch reads of whole samples, coalesced per shard.

Local shards: rows are grouped by shard and merged into runs of nearby samples (a block of the epoch order is
contiguous on disk), each run is one `os.pread` on a per-process cached descriptor, and every sample is a
position in the run's buffer (loader/spans.py). Batches announced ahead (`announce`) are read together with the
batch asked for, up to GROUP_BYTES of samples: energon's per-worker order takes each batch from up to
parallel_shard_iters slices at once, so one batch alone is ~one run per sample, while the next 16 batches hold
runs of ~30 samples per slice (the loader benchmark's epoch in energon's order: 2.1x faster than batch by batch).

Object stores: `open_readers` gives a `WindowReader` (large ranged GETs planned over groups of batches,
loader/window_reader.py) or, with the `local_cache` storage option, a `CachedShardReader` that reads node-local
copies of whole shards (adapters/shard_cache.py) exactly like local shards.
"""

from __future__ import annotations

import contextlib
import os
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from energon_arrow.adapters.shard_cache import ShardCache
from energon_arrow.loader.batch_columns import SourceColumns
from energon_arrow.loader.errors import StaleIndexError
from energon_arrow.loader.plan_ahead import PlanAhead
from energon_arrow.loader.shard_files import ShardFiles
from energon_arrow.loader.source import SplitSource
from energon_arrow.loader.spans import Spans

MAX_GAP = 64 * 1024  # bytes of unneeded data worth reading to merge two runs
PLAN_AHEAD = (
    32  # batches a worker announces ahead on object stores (its reader plans the groups that hold them)
)
LOCAL_AHEAD = 16  # batches a worker announces ahead on local files (read together, up to GROUP_BYTES)
GROUP_BYTES = 8 << 20  # bytes of samples read in one pass for several announced batches


def open_readers(dataset, worker: int, workers: int, ahead: PlanAhead | None = None) -> list:
    """The reader of each source of a BatchDataset in DataLoader worker `worker` of `workers`: local files,
    node-local cached copies of remote shards, or windows. Where each worker reads its own stream of samples
    (energon's order, one energon worker per DataLoader worker, one dataset) the windows are planned over this
    worker's batches alone, from `ahead` (this worker's batches and plans, loader/plan_ahead.py); otherwise over
    every worker's batches, and shared between the workers through shared memory when they were forked by one
    loader."""
    readers: list = []
    schedule = dataset.schedule
    # one source: its reader is announced every batch, so the plans it has not asked for yet stay few (PlanAhead
    # keeps each plan until every reader has passed it; a blend's source may be absent from many batches)
    own_stream = (
        ahead is not None
        and len(dataset.sources) == 1
        and hasattr(schedule, "reader_chunks")
        and getattr(schedule, "workers", None) == workers
    )
    tag = _share_tag(dataset) if workers > 1 and not own_stream else None
    verify = getattr(dataset, "verify", None) or [False] * len(dataset.sources)
    for d, src in enumerate(dataset.sources):
        if src.storage.is_local:
            readers.append(SampleReader(src))
        elif src.storage.local_cache is not None:
            readers.append(CachedShardReader(src))
        else:
            from energon_arrow.loader.window_reader import BatchFeed, WindowReader
            from energon_arrow.loader.window_share import WindowShare

            if own_stream:
                feed = BatchFeed(_own_rows_of(ahead), 0, ahead.total)
            else:
                share = None if tag is None else WindowShare.for_worker(f"{tag}-{d}", worker, workers)
                feed = BatchFeed(
                    _rows_of(dataset, d), dataset.start_batch, dataset.total_batches(), worker, workers, share
                )
            readers.append(WindowReader(src, feed))
        if verify[d]:
            from energon_arrow.loader.verify_crc import VerifiedReader

            readers[d] = VerifiedReader(readers[d], src, getattr(readers[d], "drop_copy", None))
    return readers


def _rows_of(dataset, d: int):
    """Rows of source d in each of several global batches of this rank (with its own epoch caches: the reader
    plans ahead of the batches being read)."""
    caches = dataset._caches()
    single = len(dataset.sources) == 1

    def rows_of(batches) -> list[np.ndarray]:
        return [rows if single else rows[owner == d] for owner, rows in dataset.plan_many(batches, caches)]

    return rows_of


def _own_rows_of(ahead: PlanAhead):
    """Rows of the one source in this worker's batches at several positions of its own sequence of batches."""
    key = ahead.register()

    def rows_of(positions: range) -> list[np.ndarray]:
        return [rows for _, rows in ahead.plans(key, positions)]

    return rows_of


def _share_tag(dataset) -> str | None:
    """A name the workers of one DataLoader iterator agree on: the loader's pid, the iterator's base seed and
    the dataset (forked workers see it at the same address). None outside forked DataLoader workers."""
    import torch

    info = torch.utils.data.get_worker_info()
    if info is None or "fork" not in torch.multiprocessing.get_all_start_methods():
        return None
    return f"{os.getppid()}-{(info.seed - info.id) & 0xFFFFFFFFFFFF:x}-{id(dataset):x}"


class SampleReader:
    """Samples of one source (see the module docstring). Given remote shards it reads each batch with
    `Storage.read_ranges` (coalesced, concurrent GETs per batch), for callers that do not plan ahead; the loader
    uses `open_readers`."""

    def __init__(self, src: SplitSource, max_fds: int = 128):
        self.src = src
        self.local = src.storage.is_local
        self._files = ShardFiles(max_fds)
        self._cols = SourceColumns(src)
        self._announced: deque[np.ndarray] = deque()  # rows of announced batches not read yet, in order
        self._ready: deque[Spans | list[memoryview]] = deque()  # announced batches read with an earlier one

    def _fd(self, shard: int) -> int:
        path = self.src.storage.local_path(self.src.shard_paths[shard])
        try:
            fd = self._files.fd(path)
        except OSError as exc:
            raise StaleIndexError(f"{path}: cannot open shard listed in the index: {exc.strerror}") from None
        if self.src.shard_check is not None:
            self.src.shard_check.opened(shard, fd)
        return fd

    def announce(self, rows: np.ndarray) -> None:
        """Rows of a later batch, announced in the order the batches will be read: `read` reads the batch asked
        for together with the next announced ones (module docstring)."""
        if len(rows):
            self._announced.append(rows)

    def read(self, rows: np.ndarray) -> Spans | list[memoryview]:
        """The bytes of each row's sample, in `rows` order."""
        if self._ready:
            return self._ready.popleft()
        if not self._announced or not np.array_equal(self._announced[0], rows):
            self._announced.clear()  # a caller that does not announce (or skipped ahead): this batch alone
            return self._read_rows(rows)
        group = [self._announced.popleft()]
        size = self._cols.batch(rows).span()[1].sum()
        while self._announced and size < GROUP_BYTES:
            nxt = self._announced[0]
            size += self._cols.batch(nxt).span()[1].sum()
            if size > GROUP_BYTES:
                break
            group.append(self._announced.popleft())
        if len(group) == 1:
            return self._read_rows(rows)
        data = self._read_rows(np.concatenate(group))
        cuts = np.cumsum([len(g) for g in group])
        parts = [_cut(data, a, b) for a, b in zip([0, *cuts[:-1].tolist()], cuts.tolist())]
        self._ready.extend(parts[1:])
        return parts[0]

    def _read_rows(self, rows: np.ndarray) -> Spans | list[memoryview]:
        src = self.src
        cols = self._cols.batch(rows)
        shard, (offset, size) = cols.shard, cols.span()
        if not self.local:
            rels = [src.shard_paths[s] for s in shard.tolist()]
            return src.storage.read_ranges(rels, offset, size)
        # one pass over all shards of the batch (a loop over shards with adapters.ranges per shard measured 2-3x
        # slower for batches drawn from a few blocks)
        order = np.lexsort((offset, shard))
        s_shard, s_off = shard[order], offset[order]
        s_end = s_off + size[order]
        new = run_starts(s_shard, s_off, s_end)
        starts = np.flatnonzero(new)
        run_lo = s_off[starts]
        run_hi = np.maximum.reduceat(s_end, starts)
        buffers = []
        for sid, lo, hi in zip(s_shard[starts].tolist(), run_lo.tolist(), run_hi.tolist()):
            data = os.pread(self._fd(sid), hi - lo, lo)
            if len(data) != hi - lo:
                raise StaleIndexError(
                    f"{src.storage.url_of(src.shard_paths[sid])}: shard ends before byte {hi} that the index "
                    f"expects (shard changed since prepare); run prepare again"
                )
            buffers.append(data)
        run = np.cumsum(new) - 1  # each sorted sample's run
        buf = np.empty(len(rows), np.int64)
        start = np.empty(len(rows), np.int64)
        buf[order] = run
        start[order] = s_off - run_lo[run]
        return Spans(buffers, buf, start, np.asarray(size, np.int64))

    def close(self) -> None:
        self._files.close()


def run_starts(shard: np.ndarray, start: np.ndarray, end: np.ndarray, max_gap: int = MAX_GAP) -> np.ndarray:
    """Which of the byte ranges (sorted by shard, then start) open a new read: the first of each shard, and each
    that starts more than `max_gap` past the end of every earlier range of its shard."""
    n = len(shard)
    new = np.ones(n, bool)
    if n < 2:
        return new
    first = np.ones(n, bool)
    first[1:] = shard[1:] != shard[:-1]
    # the running end restarts at each shard: every shard's ends are lifted above all earlier shards' ends
    stride = int(end.max()) + max_gap + 1
    group = np.cumsum(first) - 1
    if int(group[-1]) * stride < 1 << 62:
        run_end = np.maximum.accumulate(group * stride + end) - group * stride
    else:  # shards too large to lift without overflow: one running maximum per shard
        run_end = np.concatenate([np.maximum.accumulate(e) for e in np.split(end, np.flatnonzero(first)[1:])])
    new[1:] = first[1:] | (start[1:] > run_end[:-1] + max_gap)
    return new


def _cut(data: Spans | list[memoryview], a: int, b: int) -> Spans | list[memoryview]:
    """Samples a..b of a read (sharing its buffers)."""
    if isinstance(data, Spans):
        return Spans(data.buffers, data.buf[a:b], data.start[a:b], data.size[a:b])
    return data[a:b]


class CachedShardReader(SampleReader):
    """Samples of remote shards read from node-local copies (adapters.shard_cache), fetched whole on first use;
    announced batches have their shards fetched in the background, `fill_threads` shards at once (as many as the
    window reader's GETs in flight: with 2 the first epoch ran 19.7-26.4k samples/s on the loader benchmark's
    data, with 8 23.2-32.0k, alternating, load 3.5)."""

    def __init__(self, src: SplitSource, max_fds: int = 128, fill_threads: int = 8):
        super().__init__(src, max_fds)
        self.local = True  # reads go to the local copies
        self.cache = ShardCache(src.storage.local_cache)
        self._fills: dict[int, Future] = {}  # shard -> background fill
        self._paths: dict[int, str] = {}  # shard -> its local copy
        self._pool = ThreadPoolExecutor(fill_threads, thread_name_prefix="ea-cache-fill")

    def announce(self, rows: np.ndarray) -> None:
        super().announce(rows)
        for shard in np.unique(self.src.shard_id[rows]).tolist():
            if shard not in self._paths and shard not in self._fills:
                self._fills[shard] = self._pool.submit(self._copy, shard)

    def _copy(self, shard: int) -> str:
        return self.cache.local_copy(self.src.storage, self.src.shard_paths[shard])

    def drop_copy(self, shard: int) -> None:
        """The local copy of `shard` gave wrong bytes: it is removed from the cache and fetched again."""
        path = self._paths.pop(shard, None)
        if path is not None:
            self._files.forget(path)
            self.cache.forget(path)
            with contextlib.suppress(OSError):  # processes reading it keep their descriptors
                os.remove(path)

    def _fd(self, shard: int) -> int:
        path = self._paths.get(shard)
        if path is None:
            fill = self._fills.pop(shard, None)
            path = self._paths[shard] = fill.result() if fill is not None else self._copy(shard)
        try:
            return self._files.fd(path)
        except FileNotFoundError:  # evicted by another process since it was checked: fetch it again
            self.cache.forget(path)
            path = self._paths[shard] = self._copy(shard)
            return self._files.fd(path)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        super().close()
