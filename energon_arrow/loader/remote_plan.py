"""Read plans for shards on object stores: pure functions from the byte ranges a run of batches needs to the few
large ranged GETs ("windows") that fetch them.

The training order keeps up to `block_size` consecutive samples of a shard together, so the samples that the
next batches need lie in a few contiguous stretches of a few shards. Planning many batches at once turns those
stretches into one window each instead of one request per batch (or per sample).

How much unneeded data a window may carry is a budget, not a fixed gap: `max_overread` x the needed bytes. The
gaps between needed ranges are merged smallest first until the budget is spent (a vectorised threshold: sort
the gaps, take the largest gap whose cumulative sum still fits). Gaps up to `merge_gap` are merged whatever the
budget: reading them costs less than one more request. That is what a rank of several needs: each block of
the training order is spread over the global batches of all ranks, so one rank needs about 1/world_size of a
block's samples, scattered through it, and the budget alone would leave one GET per one or two samples (rank 0 of
2 on the loader benchmark's data: 16,108 GETs and 624 samples/s, against 91 GETs for a single rank; with
`merge_gap` 512 KiB: 84 GETs, 18.9k samples/s, 2.0x the rank's bytes; rank 0 of 8: 6,376 -> 155 GETs, 374 ->
6.2k samples/s, 6.5x its bytes - sharing windows between the ranks of a node would make that 1x).

With several DataLoader workers the batches alternate between workers, so one worker needs only its share of
each block: planned alone, its windows would either carry the other workers' samples as gaps (about
`num_workers` x the bytes) or be cut into many small requests. `plan_group` plans the batches of all workers
together instead, and each window is fetched by one worker and shared with the others.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from energon_arrow.adapters.ranges import coalesce_ranges

SHARD_STRIDE = 1 << 40  # a window key is shard * SHARD_STRIDE + offset: shards up to 1 TiB, 8 M shards


@dataclass(frozen=True)
class RemoteReadSettings:
    """How one worker reads remote shards.

    `byte_budget`: bytes of windows fetched or held at once (per worker, per dataset); `max_overread`: unneeded
    bytes a plan may fetch, as a fraction of the needed bytes; `merge_gap`: gaps merged whatever that budget (one
    more GET costs more than reading them: ~0.9 CPU-ms of client and server per GET on loopback SeaweedFS
    against ~2 CPU-ms per MB read, i.e. ~0.4 MB; 20-50 ms to the first byte on cloud object stores);
    `max_window`: the span of one GET;
    `first_plan_batches` / `plan_batches`: batches per worker planned together (windows never span two plans):
    the first group is small, so the first batch waits only for small windows; the next ones hold up to
    `plan_batches` per worker, `plan_samples` samples of all workers and the byte budget's worth of samples
    (larger groups: fewer, larger GETs; a worker plans a group in one go, ~2 us per sample where every sample
    is its own window, so `plan_samples` bounds that pause: 0.12 s for 65,536 random samples); `concurrency`:
    GETs in flight.
    """

    byte_budget: int = 256 * 1024 * 1024
    max_overread: float = 0.05
    merge_gap: int = 512 << 10
    max_window: int = 16 * 1024 * 1024
    first_plan_batches: int = 8
    plan_batches: int = 4096
    plan_samples: int = 1 << 16
    concurrency: int = 8

    def __post_init__(self):
        sizes = (
            self.byte_budget,
            self.max_window,
            self.first_plan_batches,
            self.plan_batches,
            self.plan_samples,
        )
        if min(sizes) < 1 or self.concurrency < 1:
            raise ValueError(f"RemoteReadSettings: sizes and counts must be >= 1, got {self}")
        if self.max_overread < 0 or self.merge_gap < 0:
            raise ValueError(f"RemoteReadSettings: max_overread and merge_gap must be >= 0, got {self}")


@dataclass(frozen=True)
class WindowPlan:
    """Windows (shard, [start, end)) and, for each needed range, its window and offset inside it."""

    shard: np.ndarray  # int64 [W]
    start: np.ndarray  # int64 [W]
    end: np.ndarray  # int64 [W]
    window: np.ndarray  # int64 [N] window of each range
    inner: np.ndarray  # int64 [N] offset of each range inside its window

    @property
    def fetched_bytes(self) -> int:
        return int((self.end - self.start).sum())


def gap_threshold(keys: np.ndarray, sizes: np.ndarray, budget: int) -> int:
    """The largest gap g such that merging every gap <= g between the sorted, merged ranges costs at most
    `budget` bytes (0 when none fits: touching and overlapping ranges merge for free)."""
    if keys.size < 2:
        return 0
    order = np.argsort(keys, kind="stable")
    s = keys[order]
    e = s + sizes[order]
    run_end = np.maximum.accumulate(e)
    gaps = s[1:] - run_end[:-1]
    # gaps across shards are never merged (they are at least SHARD_STRIDE minus a shard's size)
    gaps = np.sort(gaps[(gaps > 0) & (s[1:] // SHARD_STRIDE == s[:-1] // SHARD_STRIDE)])
    if not gaps.size:
        return 0
    # merging every gap <= gaps[i] costs the cumulative sum up to the last gap equal to gaps[i] (ties merge too)
    cost = np.cumsum(gaps)[np.searchsorted(gaps, gaps, side="right") - 1]
    fits = gaps[cost <= budget]
    return int(fits.max()) if fits.size else 0


def plan_windows(
    shard: np.ndarray,
    offset: np.ndarray,
    size: np.ndarray,
    max_overread: float,
    max_window: int,
    merge_gap: int = 0,
    held: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> WindowPlan:
    """Windows covering every needed range (shard[i], [offset[i], offset[i] + size[i])); ranges may repeat
    and overlap. Unneeded bytes inside windows stay within `max_overread` x the needed (distinct) bytes, but for
    gaps of at most `merge_gap` bytes, which are always merged; the starts of the ranges in one window lie
    within `max_window` bytes of each other. `held`: windows (shard, start, end) fetched already; no new window
    crosses the start or end of one (its bytes are not fetched again as a gap)."""
    shard = np.asarray(shard, np.int64)
    offset = np.asarray(offset, np.int64)
    size = np.asarray(size, np.int64)
    if shard.size and (int(offset.max() + size.max()) >= SHARD_STRIDE or int(shard.max()) >= 1 << 23):
        raise ValueError("plan_windows: shards beyond 1 TiB or more than 8 M shards are not supported")
    real = None
    if held is not None and len(held[0]):
        shard, real = _split_at(shard, offset, *held)
    keys = shard * SHARD_STRIDE + offset
    needed = _distinct_bytes(keys, size)
    threshold = max(gap_threshold(keys, size, int(needed * max_overread)), merge_gap)
    plan = coalesce_ranges(keys, size, threshold, max_window)
    w_shard = plan.starts // SHARD_STRIDE
    return WindowPlan(
        w_shard if real is None else real[w_shard],
        plan.starts - w_shard * SHARD_STRIDE,
        plan.ends - w_shard * SHARD_STRIDE,
        plan.group,
        plan.inner,
    )


def _split_at(shard, offset, h_shard, h_start, h_end) -> tuple[np.ndarray, np.ndarray]:
    """Stand-in shard ids that differ wherever a start or end of a held window lies between two ranges of a
    shard (so no window spans it), and the real shard of each stand-in id."""
    bounds = np.sort(
        np.concatenate([h_shard * SHARD_STRIDE + h_start, h_shard * SHARD_STRIDE + h_end]).astype(np.int64)
    )
    segment = np.searchsorted(bounds, shard * SHARD_STRIDE + offset, side="right")
    pairs = shard * (bounds.size + 1) + segment
    uniq, stand_in = np.unique(pairs, return_inverse=True)
    return stand_in.reshape(-1).astype(np.int64), uniq // (bounds.size + 1)


def _distinct_bytes(keys: np.ndarray, sizes: np.ndarray) -> int:
    """Bytes covered by the union of the ranges [keys, keys + sizes)."""
    if not keys.size:
        return 0
    order = np.argsort(keys, kind="stable")
    s = keys[order]
    e = s + sizes[order]
    prev_end = np.r_[s[0], np.maximum.accumulate(e)[:-1]]
    return int(np.maximum(e - np.maximum(s, prev_end), 0).sum())


def last_use(window: np.ndarray, batch_of_range: np.ndarray, n_windows: int) -> np.ndarray:
    """For each window, the last batch (sequence number) of the plan that reads from it."""
    out = np.full(n_windows, -1, np.int64)
    np.maximum.at(out, window, batch_of_range)
    return out


def first_use(window: np.ndarray, batch_of_range: np.ndarray, n_windows: int) -> np.ndarray:
    """For each window, the first batch of the plan that reads from it (the order to fetch windows in)."""
    out = np.full(n_windows, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(out, window, batch_of_range)
    return out


def covering_window(
    shard: np.ndarray,
    offset: np.ndarray,
    size: np.ndarray,
    w_shard: np.ndarray,
    w_start: np.ndarray,
    w_end: np.ndarray,
) -> np.ndarray:
    """For each range, the index of a window (w_shard, [w_start, w_end)) that holds it whole, or -1. Where
    windows overlap, only the one starting last at or before the range is considered."""
    out = np.full(len(shard), -1, np.int64)
    if not len(shard) or not len(w_shard):
        return out
    w_key = np.asarray(w_shard, np.int64) * SHARD_STRIDE + np.asarray(w_start, np.int64)
    order = np.argsort(w_key, kind="stable")
    key = np.asarray(shard, np.int64) * SHARD_STRIDE + np.asarray(offset, np.int64)
    j = np.searchsorted(w_key[order], key, side="right") - 1
    cand = order[np.maximum(j, 0)]
    ok = (j >= 0) & (w_shard[cand] == shard) & (w_end[cand] >= offset + size)
    out[ok] = cand[ok]
    return out


@dataclass(frozen=True)
class GroupPlan:
    """Windows of a group of batches read by several workers: `windows` as plan_windows gives them (one entry
    of `window` / `inner` per needed range), `fetcher[w]` the worker that GETs window w (the reader of the
    earliest batch that needs it) and `users[w, k]` whether worker k reads from it."""

    windows: WindowPlan
    fetcher: np.ndarray  # int64 [W]
    users: np.ndarray  # bool [W, K]


def plan_group(
    batch: np.ndarray,
    worker: np.ndarray,
    shard: np.ndarray,
    offset: np.ndarray,
    size: np.ndarray,
    n_workers: int,
    max_overread: float,
    max_window: int,
    merge_gap: int = 0,
    held: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> GroupPlan:
    """One plan for the needed ranges of every worker's batches in a group: range i is read by `worker[i]`
    for batch `batch[i]`. Every window is fetched once, by the worker whose batch reads it first, and shared with
    the other workers that read it, so the group's bytes stay within (1 + max_overread) x its needed bytes, plus
    the gaps of at most `merge_gap`, whatever the number of workers (planning each worker alone fetches the
    others' samples as gaps). `held`: windows fetched already, as plan_windows takes them."""
    batch = np.asarray(batch, np.int64)
    worker = np.asarray(worker, np.int64)
    if worker.size and (int(worker.min()) < 0 or int(worker.max()) >= n_workers):
        raise ValueError(f"plan_group: workers must lie in [0, {n_workers})")
    plan = plan_windows(shard, offset, size, max_overread, max_window, merge_gap, held)
    n = plan.start.size
    users = np.zeros((n, n_workers), bool)
    users[plan.window, worker] = True
    # the earliest (batch, range) of each window names its fetcher
    order = np.lexsort((batch, plan.window))
    firsts = order[np.searchsorted(plan.window[order], np.arange(n))]
    return GroupPlan(plan, worker[firsts], users)
