"""`WindowReader`: the samples of remote shards, read through windows planned over groups of batches.

The batch sequence is a pure function of the seed, so every DataLoader worker can compute the rows of every
worker's batches. The reader plans groups of batches (the batches of all workers in that stretch of the
stream) together (remote_plan.plan_group): the first group holds `first_plan_batches` batches per worker, so
the first batch waits only for small windows; the next ones are as large as `plan_batches`, `plan_samples` and
the byte budget allow (the group's samples within the budget), and the last one takes a short rest with it.
Larger groups merge more blocks of a shard into one GET: the training order scatters a shard's blocks over the
epoch, so a group that holds a fraction of the epoch finds about that fraction of each shard's blocks, mostly
apart (a ramp of doubling groups made ~7 GETs per shard on the loader benchmark's data, one group ~1). A range
that a window of the previous group holds (a merged gap, the rest of a block) is read from that window again by
the workers that read it, and no new window crosses one of them, so nothing is fetched twice at a group
boundary (the windows of the last group planned stay until the next one is planned). Each
window is fetched once, by the worker whose batch reads it first, and handed to the other workers that read it
through shared memory (window_share.py). With one worker this is the same plan without sharing.

Groups are planned one group ahead of the batches the dataset announces (it announces its batches ahead of
reading them), or when a batch is read, so the next group's windows are fetched while this one is read. This
worker's windows are fetched in the background, earliest needed first, while the bytes fetched or held stay
within the per-worker byte budget (the windows of the batch being read are always fetched); `read(rows)`
serves the next batch of this worker as positions in its windows (loader/spans.py) (windows of other workers are taken
from shared memory then), and drops every window no later batch of this worker reads. A window is received in
order into a recycled buffer (adapters/receive.py), and a batch waits only for the bytes it reads of each of its
windows, not for whole windows (a window's GET is up to `max_window` long: a batch needing the head of a 16 MiB
window no longer waits for its tail). Failed GETs are retried by the adapters (fetch_into), a cut body from the
first byte not received; every window of one shard fetched by a worker comes from one version of the object
(ETag pins).
"""

from __future__ import annotations

import mmap
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from energon_arrow.adapters.fetch import fetch_into
from energon_arrow.adapters.receive import BufferPool, ReceiveBuffer
from energon_arrow.loader.errors import LoaderError
from energon_arrow.loader.remote_plan import (
    GroupPlan,
    RemoteReadSettings,
    covering_window,
    first_use,
    last_use,
    plan_group,
)
from energon_arrow.loader.source import SplitSource
from energon_arrow.loader.spans import Spans
from energon_arrow.loader.window_share import WindowShare


@dataclass(frozen=True)
class BatchFeed:
    """The stream a worker's reader reads from: `rows_of(batches)` gives the rows of this source in each of
    several global batches; this worker (`worker` of `workers`) reads batches first + worker, first + worker +
    workers, ... below `total` (None: endless); `share` hands windows between the workers (None: not shared)."""

    rows_of: Callable[[range], list[np.ndarray]]
    first: int = 0
    total: int | None = None
    worker: int = 0
    workers: int = 1
    share: WindowShare | None = None


@dataclass
class _Window:
    name: str
    group: int
    shard: int
    start: int
    end: int
    first: int  # first read (sequence number of this worker's reads) that uses it
    last: int  # last read that uses it
    readers: list[int]  # the other workers that read it (when this worker fetches it)
    own: bool  # fetched by this worker (else taken from the worker that fetches it)
    future: Future | None = None  # this worker's fetch of it
    recv: ReceiveBuffer | None = None  # where that fetch receives it
    view: mmap.mmap | None = None  # or the mapping of another worker's fetch

    @property
    def nbytes(self) -> int:
        return self.end - self.start


class WindowReader:
    def __init__(self, src: SplitSource, feed: BatchFeed, settings: RemoteReadSettings | None = None):
        self.src, self.feed = src, feed
        self.settings = settings or RemoteReadSettings()
        self._lock = threading.Lock()
        self._batches: deque[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = deque()  # planned reads
        self._windows: dict[str, _Window] = {}
        self._waiting: list[str] = []  # own windows not submitted yet, by first use
        self._held = 0  # bytes of submitted or taken, not yet released windows
        self._group = 0  # the next group to plan
        self._group_lo = feed.first  # its first batch
        self._group_size = 0  # batches per worker of the last group planned
        self._batch_bytes = 0.0  # needed bytes per batch in the last group planned
        self._batch_rows = 0.0  # samples per batch in the last group planned
        self._ended = False  # every group of the stream is planned
        self._prev: tuple[int, GroupPlan] | None = None  # the last group planned, for the next one to reuse
        self._planned = 0  # reads planned so far (sequence numbers 0 .. _planned - 1)
        self._announced = 0
        self._next_read = 0
        self._pins: dict[str, str] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._buffers = BufferPool(self.settings.byte_budget)

    # ---- planning ----------------------------------------------------------------------------------------
    def announce(self, rows: np.ndarray) -> None:
        """Rows of this worker's next batch to be announced (batches without rows are not read): plans the
        group that holds it and starts its fetches."""
        if not len(rows):
            return
        with self._lock:
            self._announced += 1
            # one group ahead: its windows are fetched (within the byte budget) while this one is read; each
            # group's fetches start before the next group is planned (the first group's GETs are in flight while
            # the rest of the epoch is planned)
            while self._planned < self._announced + self._group_size and self._plan_group():
                self._submit(None)
            self._submit(None)

    def _next_group(self) -> range:
        """The batches of the next group (every worker computes the same groups: the sizes depend only on the
        settings and on the batches already planned)."""
        f, s = self.feed, self.settings
        n = min(s.first_plan_batches if not self._group_size else s.plan_batches, s.plan_batches)
        if self._group_size and self._batch_bytes > 0:
            n = min(n, max(1, int(s.byte_budget / (self._batch_bytes * f.workers))))
            n = min(n, max(1, int(s.plan_samples / (self._batch_rows * f.workers))))
        lo = self._group_lo
        if f.total is not None:
            left = -(-(f.total - lo) // f.workers)  # batches per worker left in the stream
            if self._group_size and left <= n + n // 2:
                n = left  # no short last group: its few blocks of each shard would come as small GETs
        hi = lo + n * f.workers if f.total is None else min(lo + n * f.workers, f.total)
        self._group_size = n
        return range(lo, max(lo, hi))

    def _plan_group(self) -> bool:
        """Plan the next group; False when the stream has ended."""
        f = self.feed
        batches = range(0) if self._ended else self._next_group()
        if not len(batches):
            self._ended = True
            return False
        g = self._group
        self._group += 1
        self._group_lo = batches.stop
        rows = [np.asarray(r, np.int64) for r in f.rows_of(batches)]
        counts = np.array([len(r) for r in rows], np.int64)
        if not counts.sum():
            self._prev = None
            return True
        allrows = np.concatenate(rows)
        bids = np.asarray(batches, np.int64)
        batch = np.repeat(bids, counts)
        worker = (batch - f.first) % f.workers
        src = self.src
        shard, offset, size = src.shard_id[allrows], src.byte_offset[allrows], src.byte_size[allrows]
        self._batch_bytes = int(size.sum()) / len(batches)
        self._batch_rows = len(allrows) / len(batches)
        # this worker's reads of the group: its non-empty batches, numbered on from _planned
        mine_b = (bids - f.first) % f.workers == f.worker
        seq_of_batch = np.full(len(bids), -1, np.int64)
        mine_nonempty = mine_b & (counts > 0)
        seq_of_batch[mine_nonempty] = self._planned + np.arange(int(mine_nonempty.sum()))
        seq = np.repeat(seq_of_batch, counts)
        name_of = np.empty(len(allrows), object)
        inner = np.empty(len(allrows), np.int64)
        new, held = self._reuse(shard, offset, size, worker, seq, name_of, inner)
        self._prev = None
        s = self.settings
        if new.any():
            plan = plan_group(
                batch[new], worker[new], shard[new], offset[new], size[new], f.workers,
                s.max_overread, s.max_window, s.merge_gap, held,
            )  # fmt: skip
            self._prev = (g, plan)
            win = plan.windows
            inner[new] = win.inner
            name_of[new] = [f"{g}-{w}" for w in win.window.tolist()]
            mine = seq[new] >= 0
            n = win.start.size
            first = first_use(win.window[mine], seq[new][mine], n)
            last = last_use(win.window[mine], seq[new][mine], n)
            used = np.flatnonzero(last >= 0)
            for w in used[np.argsort(first[used], kind="stable")].tolist():
                own = int(plan.fetcher[w]) == f.worker or f.share is None
                name = f"{g}-{w}"
                readers = np.flatnonzero(plan.users[w]).tolist() if own and f.share is not None else []
                self._windows[name] = _Window(
                    name, g, int(win.shard[w]), int(win.start[w]), int(win.end[w]), int(first[w]),
                    int(last[w]), readers, own,
                )  # fmt: skip
                if own:
                    self._waiting.append(name)
        bounds = np.r_[0, np.cumsum(counts)]
        for i in np.flatnonzero(mine_nonempty).tolist():
            lo, hi = bounds[i], bounds[i + 1]
            self._batches.append((rows[i], name_of[lo:hi].tolist(), inner[lo:hi], size[lo:hi]))
        self._planned += int(mine_nonempty.sum())
        return True

    def _reuse(self, shard, offset, size, worker, seq, name_of, inner):
        """Ranges that a window of the previous group holds (its merged gaps, the rest of a block) are read from
        it again by a worker that reads that window too, instead of being fetched twice: fills `name_of` and
        `inner` for them and keeps this worker's windows until its last such read. Every worker decides this
        from the previous plan alone, so all of them plan the same new windows. Returns (the ranges that need
        new windows, the previous windows as `held` for plan_group, or None)."""
        if self._prev is None:
            return np.ones(len(shard), bool), None
        pg, prev = self._prev
        pw = prev.windows
        cov = covering_window(shard, offset, size, pw.shard, pw.start, pw.end)
        hit = cov >= 0
        hit[hit] = prev.users[cov[hit], worker[hit]]
        inner[hit] = offset[hit] - pw.start[cov[hit]]
        name_of[hit] = [f"{pg}-{w}" for w in cov[hit].tolist()]
        mine = hit & (seq >= 0)
        again = last_use(cov[mine], seq[mine], pw.start.size)
        for w in np.flatnonzero(again >= 0).tolist():
            kept = self._windows[f"{pg}-{w}"]
            kept.last = max(kept.last, int(again[w]))
        return ~hit, (pw.shard, pw.start, pw.end)

    def _submit(self, need: int | None) -> None:
        """Start fetching waiting windows in first-use order while the byte budget allows; the windows of
        read `need` start regardless of the budget."""
        while self._waiting:
            w = self._windows[self._waiting[0]]
            if self._held + w.nbytes > self.settings.byte_budget and (need is None or w.first > need):
                return
            self._waiting.pop(0)
            self._start_fetch(w)

    def _start_fetch(self, w: _Window) -> None:
        """Start fetching `w` into a receive buffer (called with the lock held)."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.settings.concurrency, thread_name_prefix="ea-window")
        w.recv = self._buffers.take(w.nbytes)
        w.future = self._pool.submit(self._fetch, w.shard, w.start, w.recv, w.name, w.readers)
        self._held += w.nbytes

    def _fetch(self, shard: int, start: int, recv: ReceiveBuffer, name: str, readers: list[int]) -> None:
        fetch_into(self.src.storage, self.src.shard_paths[shard], start, recv, self._pins)
        if readers:
            with memoryview(recv.data) as view:
                self.feed.share.publish(name, view[: recv.size], readers)

    # ---- reading -----------------------------------------------------------------------------------------
    def read(self, rows: np.ndarray) -> Spans:
        """The bytes of each row's sample, in `rows` order: the next batch of this worker."""
        rows = np.asarray(rows, np.int64)
        if not len(rows):
            return []
        with self._lock:
            while not self._batches and self._plan_group():
                pass
            if not self._batches:
                raise LoaderError(f"{self.src.name}: batch read beyond the end of the stream")
            planned, names, inner, size = self._batches.popleft()
            if not np.array_equal(planned, rows):
                raise LoaderError(f"{self.src.name}: batch read out of the planned order")
            seq = self._next_read
            self._next_read += 1
            self._announced = max(self._announced, self._next_read)
            self._submit(seq)
            windows = {n: self._windows[n] for n in dict.fromkeys(names)}
        slot = {n: i for i, n in enumerate(windows)}
        buf = np.array([slot[n] for n in names], np.int64)
        inner, size = np.asarray(inner, np.int64), np.asarray(size, np.int64)
        need = np.zeros(len(windows), np.int64)  # of each window, the bytes this batch waits for
        np.maximum.at(need, buf, inner + size)
        spans = Spans([self._buffer(w, n) for w, n in zip(windows.values(), need.tolist())], buf, inner, size)
        with self._lock:
            self._release()
            self._submit(None)
        return spans

    def _buffer(self, w: _Window, need: int) -> mmap.mmap | bytes:
        """The buffer of a window once its first `need` bytes are there: this worker's fetch, or the mapping of
        the fetching worker's (fetched here when that one does not come)."""
        if w.view is not None:
            return w.view
        if w.future is None and not w.own:
            view = self.feed.share.take(w.name, w.nbytes)
            with self._lock:
                if view is None:
                    w.readers = []
                    self._start_fetch(w)
                else:
                    self._held += w.nbytes
                    w.view = view
                    return view
        w.recv.wait(need)
        return w.recv.data

    def _release(self) -> None:
        """Drop the windows whose reads are all done; those of the last group planned stay until the next group
        is planned (it may read them again) or the stream has ended."""
        keep = self._prev[0] if self._prev is not None and not self._ended else -1
        for name in [n for n, w in self._windows.items() if w.last < self._next_read and w.group != keep]:
            w = self._windows.pop(name)
            if w.future is not None or w.view is not None:
                self._held -= w.nbytes
            if w.recv is not None:
                self._buffers.give(w.recv, w.future.done)

    def close(self) -> None:
        """Stop fetching: fetches not started are cancelled, and a read waiting on one of them raises."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
            for w in self._windows.values():
                if w.future is not None and w.future.cancelled():
                    where = f"{self.src.shard_paths[w.shard]} bytes [{w.start}, {w.end})"
                    w.recv.fail(
                        LoaderError(
                            f"{self.src.name}: {where}: the reader was closed before this window was fetched"
                        )
                    )
        if self.feed.share is not None:
            self.feed.share.close()
