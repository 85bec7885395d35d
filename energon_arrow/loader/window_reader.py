"""`WindowReader`: the samples of remote shards, read through windows planned over several batches.

The dataset announces each batch's rows when it plans the batch (ahead of reading it). Every `plan_batches`
announced batches are planned together (remote_plan.plan_windows) and their windows are fetched in the
background, earliest needed first, while the bytes fetched or held stay within the per-worker byte budget (the
windows the batch being read needs are always fetched). `read(rows)` serves the oldest announced batch from its
windows as zero-copy views, then drops every window no later batch uses (windows of a plan are kept until
the next plan has been made while batches wait to be planned: that plan may read from them). Failed GETs are retried by
the adapters (fetch_groups); every window of one shard comes from one version of the object (ETag pins).
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from energon_arrow.adapters.fetch import fetch_groups
from energon_arrow.loader.errors import LoaderError
from energon_arrow.loader.remote_plan import (
    RemoteReadSettings,
    covering_window,
    first_use,
    last_use,
    plan_windows,
)
from energon_arrow.loader.source import SplitSource


@dataclass
class _Window:
    shard: int
    start: int
    end: int
    first: int  # first batch (sequence number) that reads it
    last: int  # last batch that reads it
    future: Future | None = None

    @property
    def nbytes(self) -> int:
        return self.end - self.start


class WindowReader:
    def __init__(self, src: SplitSource, settings: RemoteReadSettings | None = None):
        self.src = src
        self.settings = settings or RemoteReadSettings()
        self._lock = threading.Lock()
        self._announced: deque[tuple[int, np.ndarray]] = deque()  # (seq, rows) not planned yet
        self._batches: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}  # seq -> plan
        self._windows: dict[int, _Window] = {}
        self._waiting: list[int] = []  # windows not submitted yet, by first use
        self._held = 0  # bytes of submitted, not yet released windows
        self._next_seq = 0  # the next announced batch gets this number
        self._next_read = 0
        self._next_wid = 0
        self._pins: dict[str, str] = {}
        self._pool: ThreadPoolExecutor | None = None

    # ---- planning ----------------------------------------------------------------------------------------
    def announce(self, rows: np.ndarray) -> None:
        """The rows of the next batch to be read (in read order); batches without rows are not read."""
        if not len(rows):
            return
        with self._lock:
            self._announced.append((self._next_seq, np.asarray(rows, np.int64)))
            self._next_seq += 1
            if len(self._announced) >= self.settings.plan_batches:
                self._plan()
                self._submit(None)

    def _plan(self) -> None:
        """Plan every announced batch: ranges that live windows (of earlier plans) hold are read from them, the
        others get new windows, one set for all these batches."""
        if not self._announced:
            return
        seqs, rows = zip(*self._announced)
        self._announced.clear()
        counts = np.array([len(r) for r in rows], np.int64)
        allrows = np.concatenate(rows)
        src = self.src
        shard, offset, size = src.shard_id[allrows], src.byte_offset[allrows], src.byte_size[allrows]
        batch_of = np.repeat(np.asarray(seqs, np.int64), counts)
        window = np.empty(len(allrows), np.int64)
        inner = np.empty(len(allrows), np.int64)
        live = np.fromiter(self._windows, np.int64, len(self._windows))
        wins = [self._windows[w] for w in live.tolist()]
        ws, wa, wb = (np.array([getattr(w, f) for w in wins], np.int64) for f in ("shard", "start", "end"))
        held = covering_window(shard, offset, size, ws, wa, wb)
        old = held >= 0
        window[old] = live[held[old]]
        inner[old] = offset[old] - wa[held[old]]
        if old.any():  # reused windows now live until the last batch of this plan that reads them
            ids, inv = np.unique(window[old], return_inverse=True)
            for w, seq in zip(ids.tolist(), last_use(inv, batch_of[old], ids.size).tolist()):
                self._windows[w].last = max(self._windows[w].last, seq)
        new = ~old
        s = self.settings
        plan = plan_windows(shard[new], offset[new], size[new], s.max_overread, s.max_window)
        n = plan.start.size
        first, last = first_use(plan.window, batch_of[new], n), last_use(plan.window, batch_of[new], n)
        base = self._next_wid
        self._next_wid += n
        for w, (sh, a, b, f, la) in enumerate(
            zip(plan.shard.tolist(), plan.start.tolist(), plan.end.tolist(), first.tolist(), last.tolist())
        ):
            self._windows[base + w] = _Window(sh, a, b, f, la)
        self._waiting.extend(int(w) + base for w in np.argsort(first, kind="stable"))
        window[new] = plan.window + base
        inner[new] = plan.inner
        bounds = np.r_[0, np.cumsum(counts)]
        for i, seq in enumerate(seqs):
            lo, hi = bounds[i], bounds[i + 1]
            self._batches[seq] = (rows[i], window[lo:hi], inner[lo:hi], size[lo:hi])
        self._release()

    def _submit(self, need: int | None) -> None:
        """Start fetching waiting windows in first-use order while the byte budget allows; the windows of
        batch `need` start regardless of the budget."""
        while self._waiting:
            w = self._windows[self._waiting[0]]
            if self._held + w.nbytes > self.settings.byte_budget and (need is None or w.first > need):
                return
            self._waiting.pop(0)
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.settings.concurrency, thread_name_prefix="ea-window")
            w.future = self._pool.submit(self._fetch, w)
            self._held += w.nbytes

    def _fetch(self, w: _Window):
        rel = self.src.shard_paths[w.shard]
        return fetch_groups(self.src.storage, [rel], [w.start], [w.end], self._pins)[0]

    # ---- reading -----------------------------------------------------------------------------------------
    def read(self, rows: np.ndarray) -> list[memoryview]:
        """The bytes of each row's sample, in `rows` order: the oldest announced batch (announced now if it
        was not)."""
        rows = np.asarray(rows, np.int64)
        if not len(rows):
            return []
        with self._lock:
            if self._next_read == self._next_seq:
                self._announced.append((self._next_seq, rows))
                self._next_seq += 1
            seq = self._next_read
            if seq not in self._batches:
                self._plan()
            planned, windows, inner, size = self._batches.pop(seq)
            if not np.array_equal(planned, rows):
                raise LoaderError(f"{self.src.name}: batch read out of the announced order")
            self._next_read += 1
            self._submit(seq)
            futures = {w: self._windows[w].future for w in np.unique(windows).tolist()}
        buffers = {w: memoryview(f.result()) for w, f in futures.items()}
        out = [buffers[w][a : a + n] for w, a, n in zip(windows.tolist(), inner.tolist(), size.tolist())]
        with self._lock:
            if not self._announced:  # else kept until the next plan, which may read from them
                self._release()
            self._submit(None)
        return out

    def _release(self) -> None:
        """Drop the windows whose batches were all read."""
        for w in [w for w, win in self._windows.items() if win.last < self._next_read]:
            self._held -= self._windows.pop(w).nbytes

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
