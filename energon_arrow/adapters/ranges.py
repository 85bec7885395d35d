"""Pure range arithmetic: coalescing many byte ranges into few requests and splitting the results back."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class CoalescedRanges:
    """Merged fetch ranges plus, for each original request, which fetch holds it and where."""

    starts: np.ndarray  # int64 [G] start offset of each fetch
    ends: np.ndarray  # int64 [G] end offset (exclusive) of each fetch
    group: np.ndarray  # int64 [N] fetch index of each request
    inner: np.ndarray  # int64 [N] offset of each request inside its fetch


def coalesce_ranges(
    offsets, sizes, max_gap: int = 64 * 1024, max_fetch: int = 64 * 1024 * 1024
) -> CoalescedRanges:
    """Merge ranges that overlap or lie within `max_gap` bytes of each other, capping a fetch at `max_fetch`.

    Requests may come in any order and may overlap; the result maps every request back.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    sizes = np.asarray(sizes, dtype=np.int64)
    if offsets.shape != sizes.shape or offsets.ndim != 1:
        raise ValueError("offsets and sizes must be 1-D arrays of equal length")
    if (offsets < 0).any() or (sizes < 0).any():
        raise ValueError("range offsets and sizes must be non-negative")
    n = offsets.size
    if n == 0:
        empty = np.zeros(0, np.int64)
        return CoalescedRanges(empty, empty, empty, empty)
    order = np.argsort(offsets, kind="stable")
    s = offsets[order]
    e = s + sizes[order]
    # running maximum of ends: a range starts a new fetch when it begins beyond max_gap of all earlier ends
    run_end = np.maximum.accumulate(e)
    new_group = np.ones(n, dtype=bool)
    new_group[1:] = s[1:] > run_end[:-1] + max_gap
    if max_fetch > 0:
        # enforce the cap greedily; a loop over groups only (not over requests) where caps bite
        gid = np.cumsum(new_group) - 1
        starts = s[new_group]
        too_long = (run_end - starts[gid]) > max_fetch
        if too_long.any():
            new_group = _split_long_groups(s, e, new_group, max_gap, max_fetch)
    gid = np.cumsum(new_group) - 1
    starts = s[new_group]
    ends = np.maximum.reduceat(e, np.flatnonzero(new_group))
    group = np.empty(n, np.int64)
    inner = np.empty(n, np.int64)
    group[order] = gid
    inner[order] = s - starts[gid]
    return CoalescedRanges(starts, ends, group, inner)


def _split_long_groups(s, e, new_group, max_gap, max_fetch):
    out = new_group.copy()
    start = s[0]
    end = e[0]
    for i in range(1, s.size):
        if out[i] or s[i] > end + max_gap or max(end, e[i]) - start > max_fetch:
            out[i] = True
            start, end = s[i], e[i]
        else:
            end = max(end, e[i])
    return out


def split_fetched(fetched: list[bytes], plan: CoalescedRanges, sizes) -> list[memoryview]:
    """Cut each request's bytes out of the fetched buffers (zero-copy memoryviews), in request order."""
    sizes = np.asarray(sizes, dtype=np.int64)
    views = [memoryview(b) for b in fetched]
    out = []
    for g, off, size in zip(plan.group.tolist(), plan.inner.tolist(), sizes.tolist()):
        buf = views[g]
        if off + size > len(buf):
            raise EOFError(f"range ends at {off + size} beyond the {len(buf)} bytes fetched")
        out.append(buf[off : off + size])
    return out
