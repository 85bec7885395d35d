"""Epoch order and batch schedule: pure functions of (seed, epoch / batch), independent of ranks and workers."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from energon_arrow.loader.order import BlockLayout, EpochCache, EpochOrder, epoch_order, hash_uniform
from energon_arrow.loader.schedule import BatchSchedule


def _shards(counts):
    return np.repeat(np.arange(len(counts), dtype=np.int32), counts)


@given(st.lists(st.integers(0, 30), min_size=1, max_size=8), st.integers(0, 2**31), st.integers(1, 9))
@settings(max_examples=60, deadline=None)
def test_epoch_order_is_a_permutation_and_deterministic(counts, seed, block):
    shard_ids = _shards(counts)
    a = epoch_order(shard_ids, seed, 3, block_size=block)
    assert np.array_equal(np.sort(a), np.arange(len(shard_ids)))
    assert np.array_equal(a, epoch_order(shard_ids, seed, 3, block_size=block))


def _block_of_rows(shard_ids, block):
    layout = BlockLayout(shard_ids, block)
    return np.repeat(np.arange(len(layout.sizes)), layout.sizes)


def test_epochs_and_seeds_differ_and_blocks_stay_together():
    shard_ids = _shards([50, 50, 50, 50])
    e0, e1 = epoch_order(shard_ids, 1, 0, 10), epoch_order(shard_ids, 1, 1, 10)
    assert not np.array_equal(e0, e1)
    assert not np.array_equal(e0, epoch_order(shard_ids, 2, 0, 10))
    blocks = _block_of_rows(shard_ids, 10)
    # each run of 10 consecutive positions is exactly one block: reads stay within a small byte range
    assert all(len(set(blocks[e0[i : i + 10]])) == 1 for i in range(0, 200, 10))
    assert sorted(e0[:10].tolist()) == list(range(e0[:10].min(), e0[:10].min() + 10))


def test_blocks_restart_at_shard_boundaries():
    layout = BlockLayout(_shards([3, 5]), 2)
    assert layout.starts.tolist() == [0, 2, 3, 5, 7] and layout.sizes.tolist() == [2, 1, 2, 2, 1]


def test_shuffle_buffer_displaces_boundedly_and_no_shuffle_is_identity():
    shard_ids = _shards([100] * 5)
    base = epoch_order(shard_ids, 4, 0, 10)
    buffered = epoch_order(shard_ids, 4, 0, 10, shuffle_buffer=20)
    assert not np.array_equal(base, buffered)
    assert sorted(buffered.tolist()) == list(range(500))
    where = np.empty(500, np.int64)
    where[buffered] = np.arange(500)
    where_base = np.empty(500, np.int64)
    where_base[base] = np.arange(500)
    assert np.abs(where - where_base).max() < 20
    assert epoch_order(shard_ids, 4, 0, shuffle=False).tolist() == list(range(500))


@given(st.integers(1, 40), st.integers(0, 60), st.integers(1, 30))
@settings(max_examples=40, deadline=None)
def test_any_slice_of_positions_matches_the_whole_epoch(buffer, start, length):
    shard_ids = _shards([37, 41, 5, 60])
    order = EpochOrder(BlockLayout(shard_ids, 7), 11, 2, shuffle_buffer=buffer)
    whole = order.rows_at(np.arange(143))
    end = min(143, start + length)
    assert np.array_equal(order.rows_at(np.arange(start, end)), whole[start:end])


def test_hash_uniform_range_and_determinism():
    u = hash_uniform(1, 2, 3, np.arange(10_000))
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.02
    assert np.array_equal(u, hash_uniform(1, 2, 3, np.arange(10_000)))
    assert not np.array_equal(u, hash_uniform(1, 3, 3, np.arange(10_000)))


def test_stream_positions_wrap_into_later_epochs():
    shard_ids = _shards([7, 6])
    cache = EpochCache(BlockLayout(shard_ids, 4), 5, 0, True)
    rows = cache.rows_at(np.arange(0, 39))
    for e in range(3):
        assert np.array_equal(rows[e * 13 : (e + 1) * 13], epoch_order(shard_ids, 5, e, 4))


def test_blend_schedule_exact_proportions_and_rank_independence():
    sched = BatchSchedule([1000, 1000, 1000], 16, seed=9, weights=[1, 2, 5])
    counts = np.zeros(3, np.int64)
    for b in range(100):
        owner, pos = sched.slots(b, 0, 16)
        counts += np.bincount(owner, minlength=3)
        # rank slices of a batch concatenate to the whole batch
        parts = [sched.slots(b, r * 4, (r + 1) * 4) for r in range(4)]
        assert np.array_equal(np.concatenate([p[0] for p in parts]), owner)
        assert np.array_equal(np.concatenate([p[1] for p in parts]), pos)
    assert counts.tolist() == [200, 400, 1000]
    # every source's stream positions are used once each, in a contiguous prefix
    owner = np.concatenate([sched.slots(b, 0, 16)[0] for b in range(100)])
    pos = np.concatenate([sched.slots(b, 0, 16)[1] for b in range(100)])
    for d in range(3):
        assert sorted(pos[owner == d].tolist()) == list(range(counts[d]))


def test_concat_schedule_with_limit():
    sched = BatchSchedule([5, 3], 3, seed=0)
    seen = [sched.slots(b, 0, 3, limit=8) for b in range(3)]
    assert [o.tolist() for o, _ in seen] == [[0, 0, 0], [0, 0, 1], [1, 1]]
    assert [p.tolist() for _, p in seen] == [[0, 1, 2], [3, 4, 0], [1, 2]]


def test_blocks_in_order_keep_table_order_inside_each_block():
    """energon's max_samples_per_sequence=None: each block is read sequentially; the blocks are still permuted."""
    layout = BlockLayout(np.repeat(np.arange(4), 10), 5)
    order = EpochOrder(layout, seed=3, epoch=0, in_order=True)
    rows = order.rows_at(np.arange(order.n))
    assert sorted(rows.tolist()) == list(range(40))
    runs = rows.reshape(-1, 5)
    assert (np.diff(runs, axis=1) == 1).all() and (runs[:, 0] % 5 == 0).all()
    assert runs[:, 0].tolist() != sorted(runs[:, 0].tolist())  # blocks permuted
    cache = EpochCache(layout, 3, 0, True, 1, True)
    assert (
        cache.rows_at(np.arange(40, 80)).tolist()
        == EpochOrder(layout, 3, 1, in_order=True).rows_at(np.arange(40)).tolist()
    )
    shuffled = EpochOrder(layout, seed=3, epoch=0).rows_at(np.arange(40)).reshape(-1, 5)
    assert not (np.diff(shuffled, axis=1) == 1).all()  # without it, samples are permuted inside blocks
