"""save_state_global / restore_state_global across two torch.distributed (gloo) ranks: the states are gathered
on one rank, and restored either from the whole list on every rank or scattered from the source rank."""

from __future__ import annotations

import pytest

import energon_arrow as ea
from energon_arrow.testing.ranks import run_gloo_ranks
from tests.loader.test_loader_distributed import RawTE

pytestmark = pytest.mark.distributed


def _keys(loader, n):
    it = iter(loader)
    out = [next(it).__key__ for _ in range(n)]
    it.close()
    return out


def _rank_main(rank: int, root: str) -> dict:
    import torch.distributed as dist

    wc = ea.WorkerConfig.default_worker_config(num_workers=0)

    def loader():
        ds = ea.get_train_dataset(root, worker_config=wc, batch_size=3, task_encoder=RawTE())
        return ea.get_savable_loader(ds)

    ref = _keys(loader(), 6)[3:]
    first = loader()
    _keys(first, 3)
    states = first.save_state_global(global_dst_rank=0)
    everywhere = [None, None]
    dist.all_gather_object(everywhere, states)  # rank 0's gathered list, shared for the first restore
    from_list = loader()
    from_list.restore_state_global(everywhere[0])
    scattered = loader()
    scattered.restore_state_global(states if rank == 0 else None, src_rank=0)
    return {
        "gathered": states is not None and len(states),
        "list": _keys(from_list, 3) == ref,
        "scatter": _keys(scattered, 3) == ref,
    }


def test_state_global_two_ranks(prepared_root):
    r0, r1 = run_gloo_ranks(_rank_main, prepared_root)
    assert r0 == {"gathered": 2, "list": True, "scatter": True}
    assert r1 == {"gathered": False, "list": True, "scatter": True}
