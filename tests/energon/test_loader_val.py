"""Validation: every sample exactly once, in order, no shuffling, sharded across ranks."""

from __future__ import annotations

import pytest

import energon_arrow as ea
from energon_arrow.loader.errors import LoaderError
from tests.loader.conftest import PER_SHARD


class RawTE(ea.DefaultTaskEncoder):
    decoder = None


def _val(root, rank=0, world=1, workers=0, batch=3, **kw):
    wc = ea.WorkerConfig(rank=rank, world_size=world, num_workers=workers)
    return ea.get_loader(
        ea.get_val_dataset(root, worker_config=wc, batch_size=batch, task_encoder=RawTE(), **kw)
    )


def test_val_in_order_once(prepared_root):
    loader = _val(prepared_root, workers=0)
    keys = [k for b in loader for k in b.__key__]
    assert keys == [f"000003_{i:06d}" for i in range(PER_SHARD)]
    assert len(loader) == -(-PER_SHARD // 3)
    assert [k for b in loader for k in b.__key__] == keys  # a second pass starts over


@pytest.mark.parametrize("workers", [0, 2])
def test_leaving_after_the_last_batch_ends_the_pass_on_the_next_iteration(prepared_root, workers):
    """As energon: a pass left after its last batch (zip, break) is ended by the next iteration, which yields
    nothing, also when restored from a state saved at that point; only the iteration after starts a new pass."""
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=workers)

    def loader():
        ds = ea.get_val_dataset(prepared_root, worker_config=wc, batch_size=3, task_encoder=RawTE())
        return ea.get_savable_loader(ds)

    first = loader()
    n = len(first)
    assert len([b for _, b in zip(range(n), first)]) == n  # zip stops before asking for the end
    state = first.save_state_rank()
    assert [len(list(first)) for _ in range(2)] == [0, n]
    restored = loader()
    restored.restore_state_rank(state)
    assert [len(list(restored)) for _ in range(2)] == [0, n]
    ended = loader()
    list(ended)
    after_end = loader()
    after_end.restore_state_rank(ended.save_state_rank())
    assert len(list(after_end)) == n  # a pass that reached its end: the restored loader starts a new one


def test_val_workers_batch_their_own_slices_round_robin(prepared_root):
    """energon's order: worker 0 has samples 0-19, worker 1 20-39; batches of 3 per worker, one from each in
    turn; the last batch of each worker is partial (tests/conformance/test_loader_energon.py compares)."""
    loader = _val(prepared_root, workers=2)
    batches = [[int(k[-6:]) for k in b.__key__] for b in loader]
    assert len(loader) == len(batches) == 2 * 7
    assert batches[:3] == [[0, 1, 2], [20, 21, 22], [3, 4, 5]] and batches[-2:] == [[18, 19], [38, 39]]
    assert sorted(i for b in batches for i in b) == list(range(PER_SHARD))


@pytest.mark.parametrize("world", [2, 3])
def test_val_sharded_across_ranks(prepared_root, world):
    per_rank = [
        [k for b in _val(prepared_root, rank=r, world=world, workers=1, batch=2) for k in b.__key__]
        for r in range(world)
    ]
    merged = [k for keys in per_rank for k in keys]
    assert sorted(merged) == [f"000003_{i:06d}" for i in range(PER_SHARD)]
    assert len(merged) == len(set(merged))
    assert all(keys == sorted(keys) for keys in per_rank)


def test_val_drop_last(prepared_root):
    keys = [k for b in _val(prepared_root, batch=7, batch_drop_last=True) for k in b.__key__]
    assert len(keys) == (PER_SHARD // 7) * 7


def test_empty_split_is_an_error(prepared_root):
    """A split with no samples is an error for validation as for training (energon: EmptyDatasetError)."""
    with pytest.raises(LoaderError, match=r"split has no samples: .*split .test."):
        _val(prepared_root, split_part="test")
