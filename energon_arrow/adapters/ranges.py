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
    """Merge ranges that overlap or lie within `max_gap` bytes of each other into fetches.

    Requests may come in any order and may overlap; the result maps every request back. With `max_fetch` > 0
    the starts of the requests in one fetch lie within `max_fetch` bytes of each other, so a fetch spans at
    most `max_fetch` plus its longest request. Vectorised: O(N log N) for N requests, no per-request loop.
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
    # a range opens a new fetch when it starts more than max_gap beyond the end of everything before it
    run_end = np.maximum.accumulate(e)
    new_group = np.ones(n, dtype=bool)
    new_group[1:] = s[1:] > run_end[:-1] + max_gap
    if max_fetch > 0:
        # cap: cut each merged run into windows of max_fetch bytes of start offsets
        first = np.flatnonzero(new_group)
        run_start = s[first][np.cumsum(new_group) - 1]
        window = (s - run_start) // max_fetch
        new_group[1:] |= window[1:] != window[:-1]
    first = np.flatnonzero(new_group)
    gid = np.cumsum(new_group) - 1
    starts = s[first]
    ends = np.maximum.reduceat(e, first)
    group = np.empty(n, np.int64)
    inner = np.empty(n, np.int64)
    group[order] = gid
    inner[order] = s - starts[gid]
    return CoalescedRanges(starts, ends, group, inner)


def split_fetched(fetched: list, plan: CoalescedRanges, sizes) -> list[memoryview]:
    """Cut each request's bytes out of the fetched buffers, in request order.

    Requests get zero-copy views of their fetch, except in fetches that are mostly gap (less than half of the
    bytes were asked for): those requests get their own copies, so that keeping a result does not keep the
    whole fetch alive.
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    lengths = np.array([len(b) for b in fetched], dtype=np.int64)
    useful = np.bincount(plan.group, weights=sizes, minlength=lengths.size)
    copy = (2 * useful < lengths).tolist()
    views = [memoryview(b) for b in fetched]
    ends = plan.inner + sizes
    bad = np.flatnonzero(ends > lengths[plan.group]) if sizes.size else []
    if len(bad):
        i = int(bad[0])
        raise EOFError(f"range ends at {int(ends[i])} beyond the {int(lengths[plan.group[i]])} bytes fetched")
    out = []
    for g, off, end in zip(plan.group.tolist(), plan.inner.tolist(), ends.tolist()):
        view = views[g][off:end]
        out.append(memoryview(view.tobytes()) if copy[g] else view)
    return out
