"""Two torch.distributed processes (gloo on loopback): rank and world size come from the process group."""

from __future__ import annotations

import pytest

import energon_arrow as ea
from energon_arrow.testing.ranks import run_gloo_ranks
from tests.energon_order import global_order_train_dataset

pytestmark = pytest.mark.distributed


class RawTE(ea.DefaultTaskEncoder):
    decoder = None


def _rank_main(rank: int, root: str) -> dict:
    wc = ea.WorkerConfig.default_worker_config(num_workers=1)
    train = global_order_train_dataset(root, worker_config=wc, batch_size=3, task_encoder=RawTE())
    it = iter(ea.get_loader(train))
    train_keys = [next(it).__key__ for _ in range(5)]
    it.close()
    val = ea.get_val_dataset(root, worker_config=wc, batch_size=4, task_encoder=RawTE())
    val_keys = [k for b in ea.get_loader(val) for k in b.__key__]
    return {"rank": wc.rank, "world": wc.world_size, "train": train_keys, "val": val_keys}


def test_two_gloo_ranks(prepared_root):
    r0, r1 = run_gloo_ranks(_rank_main, prepared_root)
    assert (r0["rank"], r0["world"], r1["rank"], r1["world"]) == (0, 2, 1, 2)
    # the global batch (6) of a single process equals rank 0's slice followed by rank 1's
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
    it = iter(
        ea.get_loader(
            global_order_train_dataset(prepared_root, worker_config=wc, batch_size=6, task_encoder=RawTE())
        )
    )
    single = [next(it).__key__ for _ in range(5)]
    it.close()
    assert [a + b for a, b in zip(r0["train"], r1["train"])] == single
    val = r0["val"] + r1["val"]
    assert sorted(val) == [f"000003_{i:06d}" for i in range(40)] and len(set(val)) == 40
