"""Reading byte ranges of one remote file: exact range requests plus a bounded LRU cache of fetched extents.

Megatron's S3 reader fetches 256 MiB blocks and keeps one, so shuffled reads re-download almost every time.
Here each miss fetches only the bytes asked for (optionally extended by `readahead_bytes` for sequential
scans); overlapping or adjacent misses of one call become one request, and all requests of a call run
concurrently. Fetched extents stay in an LRU cache bounded by `capacity_bytes`.

Sequential reads (calls whose first miss starts where the previous fetch ended, as when sequences are read in
file order) switch to windows: from the second such miss in a row the read-ahead doubles from SEQUENTIAL_MIN up
to SEQUENTIAL_MAX (at most a quarter of the cache), and it drops back to `readahead_bytes` at the first jump, so
random orders still fetch only the bytes asked for.

With a checksum side file (`side`, tokens/checksums.py) every fetch is widened to whole chunks and each chunk is
checked before any byte is copied out or cached (the cache holds verified bytes only); extents with a mismatch
are fetched again (the storage's retry policy), then ChecksumError names the chunk.
"""

from __future__ import annotations

import bisect
import logging
from collections import OrderedDict

import numpy as np

from energon_arrow.adapters.retry import reread_attempts
from energon_arrow.tokens.checksums import bad_chunk, chunk_mismatch

log = logging.getLogger(__name__)

SEQUENTIAL_MIN = 1 << 20  # first read-ahead window once reads are seen to be sequential
SEQUENTIAL_MAX = 16 << 20
SEQUENTIAL_SLACK = 64 << 10  # a miss starting this close after the previous fetch's end counts as sequential


def next_readahead(
    current: int, streak: int, last_end: int, start: int, base: int, maximum: int
) -> tuple[int, int]:
    """(read-ahead, streak) for a miss at `start` after a fetch that ended at `last_end` (-1: none yet). A miss
    within SEQUENTIAL_SLACK of that end continues the streak; from the second such miss in a row the read-ahead
    doubles (from SEQUENTIAL_MIN, up to `maximum`). Any other miss resets to `base` (a lone random read landing
    near the last fetch does not start windows)."""
    if last_end < 0 or abs(start - last_end) > SEQUENTIAL_SLACK:
        return base, 0
    if streak < 1:
        return base, streak + 1
    return max(base, min(maximum, max(SEQUENTIAL_MIN, 2 * current))), streak + 1


class RangeCache:
    """Serve byte ranges of `rel` in `storage` (a remote Storage) into caller buffers."""

    def __init__(
        self, storage, rel: str, file_size: int, capacity_bytes: int, readahead_bytes: int = 0, side=None
    ):
        if capacity_bytes < 0 or readahead_bytes < 0:
            raise ValueError("cache capacity and readahead must be non-negative")
        self.storage = storage.child("")  # a private copy: exact extents, never widened by gap coalescing
        self.storage.range_gap = 0
        self.rel = rel
        self.side = side  # checksums.SideFile: chunks checked as fetched (None: unverified)
        self.file_size = int(file_size)
        self.capacity_bytes = int(capacity_bytes)
        self.readahead_bytes = int(readahead_bytes)
        self._readahead = self.readahead_bytes  # current window: grows while reads are sequential
        self._last_end = -1  # end of the last fetch
        self._streak = 0  # sequential misses in a row
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
        maximum = max(self.readahead_bytes, min(SEQUENTIAL_MAX, self.capacity_bytes // 4))
        self._readahead, self._streak = next_readahead(
            self._readahead, self._streak, self._last_end, int(ms.min()), self.readahead_bytes, maximum
        )
        readahead = self._readahead
        if self.side is not None:  # whole chunks
            chunk = self.side.chunk
            ext_s, ext_e = ms // chunk * chunk, np.minimum(-(-me // chunk) * chunk, self.file_size)
            readahead = -(-readahead // chunk) * chunk
        else:
            ext_s, ext_e = ms, me
        ext_s, ext_e = merge_extents(ext_s, ext_e, readahead, self.file_size)
        self._last_end = int(ext_e.max())
        fetched = self._read(ext_s, ext_e - ext_s)
        which = np.searchsorted(ext_s, ms, side="right") - 1
        for s, e, w, o in zip(ms.tolist(), me.tolist(), which.tolist(), out_offsets[misses].tolist()):
            out[o : o + e - s] = np.frombuffer(fetched[w], np.uint8, e - s, s - int(ext_s[w]))
        for s, view in zip(ext_s.tolist(), fetched):
            self._insert(s, bytes(view))

    def _read(self, starts: np.ndarray, sizes: np.ndarray) -> list:
        """The extents [starts[i], starts[i]+sizes[i]), each checked against the side file when there is one."""
        fetched = list(self.storage.read_ranges(self.rel, starts, sizes))
        self.requests += starts.size
        self.bytes_fetched += int(sizes.sum())
        if self.side is None:
            return fetched
        bad = {i: k for i, b in enumerate(fetched) if (k := bad_chunk(self.side, b, int(starts[i]))) >= 0}
        reads = 1
        if not bad:
            return fetched
        url = self.storage.url_of(self.rel)
        for _ in reread_attempts(self.storage):
            log.warning(
                "%s: %d fetched extent(s) did not match their CRC32C; reading them again", url, len(bad)
            )
            again = np.array(sorted(bad), np.int64)
            for i, b in zip(again.tolist(), self.storage.read_ranges(self.rel, starts[again], sizes[again])):
                fetched[i] = b
            self.requests += again.size
            self.bytes_fetched += int(sizes[again].sum())
            reads += 1
            bad = {
                i: k for i in again.tolist() if (k := bad_chunk(self.side, fetched[i], int(starts[i]))) >= 0
            }
            if not bad:
                return fetched
        raise chunk_mismatch(self.side, url, min(bad.values()), reads)


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
