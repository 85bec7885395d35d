"""Reading byte ranges of one remote file: exact range requests plus a bounded LRU cache of fetched extents.

Megatron's S3 reader fetches 256 MiB blocks and keeps one, so shuffled reads re-download almost every time.
Here each miss fetches only the bytes asked for (optionally extended by `readahead_bytes` for sequential
scans); overlapping or adjacent misses of one call become one request, and all requests of a call run
concurrently. Fetched extents stay in an LRU cache bounded by `capacity_bytes`.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict

import numpy as np


class RangeCache:
    """Serve byte ranges of `rel` in `storage` (a remote Storage) into caller buffers."""

    def __init__(self, storage, rel: str, file_size: int, capacity_bytes: int, readahead_bytes: int = 0):
        if capacity_bytes < 0 or readahead_bytes < 0:
            raise ValueError("cache capacity and readahead must be non-negative")
        self.storage = storage.child("")  # a private copy: exact extents, never widened by gap coalescing
        self.storage.range_gap = 0
        self.rel = rel
        self.file_size = int(file_size)
        self.capacity_bytes = int(capacity_bytes)
        self.readahead_bytes = int(readahead_bytes)
        self._entries: OrderedDict[int, tuple[int, bytes]] = OrderedDict()  # start -> (end, data), LRU order
        self._starts: list[int] = []  # sorted starts of cached extents
        self._cached_bytes = 0
        self.bytes_fetched = 0
        self.requests = 0
        self.hits = 0

    def stats(self) -> dict[str, int]:
        return {
            "bytes_fetched": self.bytes_fetched,
            "requests": self.requests,
            "cache_hits": self.hits,
            "cached_bytes": self._cached_bytes,
        }

    def _lookup(self, start: int, end: int):
        i = bisect.bisect_right(self._starts, start) - 1
        if i < 0:
            return None
        s = self._starts[i]
        e, data = self._entries[s]
        if end > e:
            return None
        self._entries.move_to_end(s)
        return data, start - s

    def _insert(self, start: int, data: bytes) -> None:
        size = len(data)
        if size == 0 or size > self.capacity_bytes:
            return
        old = self._entries.pop(start, None)
        if old is not None:
            self._cached_bytes -= len(old[1])
        else:
            bisect.insort(self._starts, start)
        self._entries[start] = (start + size, data)
        self._cached_bytes += size
        while self._cached_bytes > self.capacity_bytes:
            s, (_, d) = self._entries.popitem(last=False)
            self._cached_bytes -= len(d)
            del self._starts[bisect.bisect_left(self._starts, s)]

    def read_into(
        self, starts: np.ndarray, sizes: np.ndarray, out: np.ndarray, out_offsets: np.ndarray
    ) -> None:
        """Copy bytes [starts[i], starts[i]+sizes[i]) of the file to out[out_offsets[i]:...] (out: uint8)."""
        starts = np.asarray(starts, np.int64)
        sizes = np.asarray(sizes, np.int64)
        ends = starts + sizes
        if starts.size and int(ends.max()) > self.file_size:
            bad = int(np.argmax(ends))
            raise ValueError(
                f"{self.storage.url_of(self.rel)}: range [{int(starts[bad])}, {int(ends[bad])}) is beyond "
                f"the file's {self.file_size} bytes"
            )
        misses = []
        for i, (s, e, o) in enumerate(zip(starts.tolist(), ends.tolist(), out_offsets.tolist())):
            if s == e:
                continue
            hit = self._lookup(s, e) if self._entries else None
            if hit is None:
                misses.append(i)
                continue
            self.hits += 1
            data, inner = hit
            out[o : o + e - s] = np.frombuffer(data, np.uint8, e - s, inner)
        if misses:
            self._fetch_misses(np.asarray(misses, np.int64), starts, ends, out, out_offsets)

    def _fetch_misses(self, misses, starts, ends, out, out_offsets) -> None:
        ms, me = starts[misses], ends[misses]
        ext_s, ext_e = merge_extents(ms, me, self.readahead_bytes, self.file_size)
        fetched = self.storage.read_ranges(self.rel, ext_s, ext_e - ext_s)
        self.requests += ext_s.size
        self.bytes_fetched += int((ext_e - ext_s).sum())
        which = np.searchsorted(ext_s, ms, side="right") - 1
        for s, e, w, o in zip(ms.tolist(), me.tolist(), which.tolist(), out_offsets[misses].tolist()):
            out[o : o + e - s] = np.frombuffer(fetched[w], np.uint8, e - s, s - int(ext_s[w]))
        for s, view in zip(ext_s.tolist(), fetched):
            self._insert(s, bytes(view))


def merge_extents(starts: np.ndarray, ends: np.ndarray, readahead: int, limit: int):
    """Sorted, disjoint fetch extents covering every [starts[i], ends[i]) (each at least `readahead` long,
    clipped to `limit`); overlapping or touching ranges merge into one."""
    order = np.argsort(starts, kind="stable")
    s = starts[order]
    e = np.minimum(np.maximum(ends[order], s + readahead), limit)
    run_end = np.maximum.accumulate(e)
    new = np.ones(s.size, bool)
    new[1:] = s[1:] > run_end[:-1]
    first = np.flatnonzero(new)
    return s[first], np.maximum.reduceat(run_end, first)
