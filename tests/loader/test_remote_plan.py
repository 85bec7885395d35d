"""Window plans for remote shards: pure arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

from energon_arrow.loader.remote_plan import (
    RemoteReadSettings,
    first_use,
    gap_threshold,
    last_use,
    plan_group,
    plan_windows,
)


def _covers(plan, shard, offset, size):
    for i in range(len(shard)):
        w = plan.window[i]
        assert plan.shard[w] == shard[i]
        assert plan.start[w] + plan.inner[i] == offset[i]
        assert plan.start[w] + plan.inner[i] + size[i] <= plan.end[w]


def test_contiguous_ranges_become_one_window_for_free():
    offset = np.arange(10, dtype=np.int64) * 100
    size = np.full(10, 100, np.int64)
    shard = np.zeros(10, np.int64)
    plan = plan_windows(shard, offset[::-1], size, max_overread=0.0, max_window=1 << 20)
    assert plan.start.tolist() == [0] and plan.end.tolist() == [1000]
    _covers(plan, shard, offset[::-1], size)


def test_overread_budget_is_respected_smallest_gaps_first():
    # needed: [0,100) [110,210) [300,400) [1000,1100): gaps 10, 90, 600; needed 400 bytes
    offset = np.array([0, 110, 300, 1000], np.int64)
    size = np.full(4, 100, np.int64)
    shard = np.zeros(4, np.int64)
    for overread, windows in [(0.0, 4), (0.025, 3), (0.25, 2), (1.0, 2), (1.75, 1)]:
        plan = plan_windows(shard, offset, size, overread, 1 << 20)
        assert plan.start.size == windows, overread
        assert plan.fetched_bytes - 400 <= overread * 400
        _covers(plan, shard, offset, size)


def test_gaps_up_to_merge_gap_are_merged_whatever_the_budget():
    # the same ranges: gaps 10, 90, 600 (a rank's share of a block: scattered samples, gaps as large as them)
    offset = np.array([0, 110, 300, 1000], np.int64)
    size = np.full(4, 100, np.int64)
    shard = np.zeros(4, np.int64)
    for merge_gap, windows in [(0, 4), (10, 3), (89, 3), (90, 2), (600, 1)]:
        plan = plan_windows(shard, offset, size, 0.0, 1 << 20, merge_gap)
        assert plan.start.size == windows, merge_gap
        _covers(plan, shard, offset, size)
    # across shards nothing merges
    plan = plan_windows(np.arange(4, dtype=np.int64), offset, size, 0.0, 1 << 20, 1 << 20)
    assert plan.start.size == 4


def test_no_window_crosses_a_held_one():
    # ranges [0,100) [200,300) [400,500) of shard 0 and [0,100) of shard 1; held: shard 0 [150, 350) (its bytes
    # came in an earlier window), so [0,100) and [400,500) stay apart although merge_gap would join them
    shard = np.array([0, 0, 1], np.int64)
    offset = np.array([0, 400, 0], np.int64)
    size = np.full(3, 100, np.int64)
    held = (np.array([0]), np.array([150]), np.array([350]))
    plan = plan_windows(shard, offset, size, 0.0, 1 << 20, 1 << 20, held)
    assert sorted(zip(plan.shard.tolist(), plan.start.tolist(), plan.end.tolist())) == [
        (0, 0, 100), (0, 400, 500), (1, 0, 100)
    ]  # fmt: skip
    _covers(plan, shard, offset, size)
    # a held window elsewhere (another shard, or beyond the ranges) splits nothing
    for h in [
        (np.array([1]), np.array([150]), np.array([350])),
        (np.array([0]), np.array([600]), np.array([700])),
    ]:
        plan = plan_windows(shard, offset, size, 0.0, 1 << 20, 1 << 20, h)
        assert sorted(zip(plan.shard.tolist(), plan.start.tolist(), plan.end.tolist())) == [
            (0, 0, 500),
            (1, 0, 100),
        ]


def test_windows_never_span_shards_and_respect_max_window():
    shard = np.repeat(np.arange(3, dtype=np.int64), 50)
    offset = np.tile(np.arange(50, dtype=np.int64) * 1000, 3)
    size = np.full(150, 1000, np.int64)
    plan = plan_windows(shard, offset, size, 1.0, max_window=10_000)
    assert plan.start.size == 15  # 5 windows of 10 samples per shard
    assert ((plan.end - plan.start) <= 10_000).all()
    _covers(plan, shard, offset, size)


def test_repeated_and_overlapping_ranges():
    shard = np.array([1, 1, 1, 0], np.int64)
    offset = np.array([500, 500, 520, 500], np.int64)
    size = np.array([100, 100, 10, 100], np.int64)
    plan = plan_windows(shard, offset, size, 0.0, 1 << 20)
    assert sorted(zip(plan.shard.tolist(), plan.start.tolist(), plan.end.tolist())) == [
        (0, 500, 600),
        (1, 500, 600),
    ]
    _covers(plan, shard, offset, size)


def test_interleaved_samples_of_two_workers():
    """A worker planning alone that needs every other sample: overread 1.0 reads the whole stretch in one GET,
    0.1 stays within 10% more bytes than needed."""
    offset = np.arange(0, 200, 2, dtype=np.int64) * 512
    size = np.full(offset.size, 512, np.int64)
    shard = np.zeros(offset.size, np.int64)
    whole = plan_windows(shard, offset, size, 1.0, 1 << 30)
    assert whole.start.size == 1
    tight = plan_windows(shard, offset, size, 0.1, 1 << 30)
    assert tight.fetched_bytes <= 1.1 * size.sum()
    _covers(tight, shard, offset, size)


def test_gap_threshold_and_uses():
    keys = np.array([0, 20, 50], np.int64)
    sizes = np.array([10, 10, 10], np.int64)  # gaps 10 and 20
    assert [gap_threshold(keys, sizes, b) for b in (0, 9, 10, 29, 30)] == [0, 0, 10, 10, 20]
    window = np.array([0, 1, 0, 2], np.int64)
    batch = np.array([3, 4, 7, 5], np.int64)
    assert first_use(window, batch, 3).tolist() == [3, 4, 5]
    assert last_use(window, batch, 3).tolist() == [7, 4, 5]


def test_settings_are_checked():
    with pytest.raises(ValueError, match="max_overread"):
        RemoteReadSettings(max_overread=-1)
    with pytest.raises(ValueError, match="merge_gap"):
        RemoteReadSettings(merge_gap=-1)
    with pytest.raises(ValueError, match=">= 1"):
        RemoteReadSettings(plan_batches=0)


def _interleaved(workers: int, batches: int, per_batch: int, size: int = 512):
    """Batches of `per_batch` consecutive samples of one shard, batch b read by worker b % workers."""
    batch = np.repeat(np.arange(batches, dtype=np.int64), per_batch)
    offset = np.arange(batches * per_batch, dtype=np.int64) * size
    return (
        batch,
        batch % workers,
        np.zeros(offset.size, np.int64),
        offset,
        np.full(offset.size, size, np.int64),
    )


def test_group_plan_fetches_every_byte_once_whatever_the_workers():
    """Planned alone, each of 2 workers would read the other's batches as gaps; planned together the stretch
    is one window, fetched by the worker of the first batch and read by both."""
    for workers in (1, 2, 3):
        batch, worker, shard, offset, size = _interleaved(workers, 12, 8)
        plan = plan_group(batch, worker, shard, offset, size, workers, 0.0, 1 << 30)
        assert plan.windows.start.tolist() == [0] and plan.windows.end.tolist() == [12 * 8 * 512]
        assert plan.fetcher.tolist() == [0]
        assert plan.users.tolist() == [[True] * workers]
        _covers(plan.windows, shard, offset, size)


def test_group_plan_names_the_first_reader_as_fetcher():
    # two shards; shard 1 is first read by batch 1 (worker 1), shard 0 by batch 0 (worker 0); window 2 (shard 0
    # far away) only by worker 1
    batch = np.array([3, 0, 1, 2, 5], np.int64)
    worker = batch % 2
    shard = np.array([0, 0, 1, 1, 0], np.int64)
    offset = np.array([100, 0, 0, 100, 1 << 20], np.int64)
    size = np.full(5, 100, np.int64)
    plan = plan_group(batch, worker, shard, offset, size, 2, 0.0, 1 << 30)
    got = {
        (int(plan.windows.shard[w]), int(plan.windows.start[w])): (
            int(plan.fetcher[w]),
            plan.users[w].tolist(),
        )
        for w in range(plan.windows.start.size)
    }
    assert got == {(0, 0): (0, [True, True]), (1, 0): (1, [True, True]), (0, 1 << 20): (1, [False, True])}
    _covers(plan.windows, shard, offset, size)


def test_group_plan_stays_within_the_overread_budget_with_shuffled_batches():
    rng = np.random.default_rng(0)
    batch, worker, shard, offset, size = _interleaved(4, 40, 16)
    keep = rng.random(offset.size) < 0.7  # holes: samples no batch needs
    args = [a[keep] for a in (batch, worker, shard, offset, size)]
    perm = rng.permutation(int(keep.sum()))
    args = [a[perm] for a in args]
    for overread in (0.0, 0.05, 0.5):
        plan = plan_group(*args[:5], 4, overread, 1 << 16)
        assert plan.windows.fetched_bytes <= (1 + overread) * args[4].sum()
        _covers(plan.windows, args[2], args[3], args[4])
        # every window is read by its fetcher, and the fetcher reads it first
        for w in range(plan.windows.start.size):
            mine = plan.windows.window == w
            first = np.argmin(np.where(mine, args[0], np.iinfo(np.int64).max))
            assert plan.fetcher[w] == args[1][first]
            assert plan.users[w].tolist() == [bool((args[1][mine] == k).any()) for k in range(4)]


def test_group_plan_checks_workers():
    with pytest.raises(ValueError, match="workers"):
        plan_group(*_interleaved(3, 3, 1), 2, 0.0, 1 << 20)


@pytest.mark.parametrize(
    ("budget", "samples", "sizes"),
    [
        (1 << 30, 1 << 20, [2, 16, 16, 16]),
        (14 * 4000 * 2, 1 << 20, [2, 14, 14, 20]),
        (5 * 4000 * 2, 1 << 20, [2, *[5] * 9, 3]),
        (1 << 30, 6 * 4 * 2, [2, *[6] * 8]),
    ],
)
def test_groups_grow_to_the_byte_budget(budget, samples, sizes):
    """The first group is small (the first batch waits for little); the next ones hold plan_batches, capped so
    that a group's samples take at most the byte budget and plan_samples, and the last one takes a short rest (up to half a group)
    with it; every worker plans the same groups."""
    from types import SimpleNamespace

    from energon_arrow.loader.window_reader import BatchFeed, WindowReader

    rows = np.arange(1000, dtype=np.int64)
    src = SimpleNamespace(
        shard_id=rows // 100, byte_offset=(rows % 100) * 1000, byte_size=np.full(1000, 1000)
    )
    settings = RemoteReadSettings(
        byte_budget=budget, first_plan_batches=2, plan_batches=16, plan_samples=samples
    )
    groups = {}
    for worker in range(2):
        seen = groups[worker] = []

        def rows_of(batches, seen=seen):
            seen.append(len(batches) // 2)
            return [np.arange(b * 4, b * 4 + 4) % 1000 for b in batches]

        reader = WindowReader(src, BatchFeed(rows_of, 3, 3 + 100, worker, 2), settings)
        while reader._plan_group():
            pass
        assert reader._planned == 50
    assert groups[0] == groups[1] == sizes
