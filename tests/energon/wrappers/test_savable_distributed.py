"""save_state_global / restore_state_global of a pipeline loader across two torch.distributed (gloo) ranks."""

from __future__ import annotations

import pytest

import energon_arrow as ea
from energon_arrow.testing.ranks import run_gloo_ranks
from tests.energon.wrappers.conftest import core, take, wc

pytestmark = pytest.mark.distributed


def _pipeline(root, rank):
    c = wc(0, rank, 2)
    ds = ea.ShuffleBufferDataset(core(root, c, "train", training=True), 4, worker_config=c)
    return ea.BatchDataset(ds, 3, ea.generic_batch, worker_config=c)


def _keys(it, n):
    return [list(b.__key__) for b in take(it, n)]


def _rank_main(rank: int, root: str) -> dict:
    full = _keys(iter(ea.get_savable_loader(_pipeline(root, rank))), 6)
    loader = ea.get_savable_loader(_pipeline(root, rank))
    it = iter(loader)
    first = _keys(it, 2)
    state = loader.save_state_global(global_dst_rank=0)
    assert (state is None) == (rank != 0)
    resumed = ea.get_savable_loader(_pipeline(root, rank))
    resumed.restore_state_global(state, src_rank=0)  # only rank 0 holds the states
    rest = _keys(iter(resumed), 4)
    return {"same": first + rest == full, "keys": full}


def test_global_state_round_trip_over_two_ranks(prepared_root):
    result = run_gloo_ranks(_rank_main, prepared_root, timeout=180)
    assert [r["same"] for r in result] == [True, True]
    rank0 = {k for b in result[0]["keys"] for k in b}
    rank1 = {k for b in result[1]["keys"] for k in b}
    assert not rank0 & rank1  # the ranks read disjoint ranges


def test_global_state_single_rank(prepared_root):
    c = wc()
    loader = ea.get_savable_loader(
        ea.BatchDataset(core(prepared_root, c), 4, ea.generic_batch, worker_config=c)
    )
    it = iter(loader)
    next(it)
    state = loader.save_state_global(global_dst_rank=0)
    assert isinstance(state, list) and len(state) == 1
    resumed = ea.get_savable_loader(
        ea.BatchDataset(core(prepared_root, c), 4, ea.generic_batch, worker_config=c)
    )
    resumed.restore_state_global(state)
    assert [b.__key__ for b in resumed] == [b.__key__ for b in it]
