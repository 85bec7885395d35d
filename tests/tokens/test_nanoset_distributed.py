"""Two gloo ranks on loopback, each with its own (node-local) cache dir: rank 0 builds, rank 1 receives the arrays
by broadcast, both agree on the key and end up with identical indices and their own cache entry."""

from __future__ import annotations

import os
import socket

import numpy as np
import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

from energon_arrow.tokens.builder import TokenWriter
from energon_arrow.tokens.nanoset import NanosetBuilder, NanosetConfig

pytestmark = pytest.mark.distributed


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, prefix: str, root: str, seed_by_rank: bool) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        cache = os.path.join(root, f"node{rank}")
        seed = 11 + (rank if seed_by_rank else 0)
        cfg = NanosetConfig([prefix], 16, seed=seed, split="1", create_attention_mask=False, cache_dir=cache)
        try:
            ds = NanosetBuilder(cfg).build([300])[0]
        except RuntimeError as exc:
            with open(os.path.join(root, f"error{rank}.txt"), "w") as f:
                f.write(str(exc))
            return
        np.save(os.path.join(root, f"shuffle{rank}.npy"), np.asarray(ds.shuffle_index))
        np.save(os.path.join(root, f"tokens{rank}.npy"), ds.get_batch(np.arange(8))["tokens"].numpy())
    finally:
        dist.destroy_process_group()


@pytest.fixture
def prefix(tmp_path):
    lengths = np.random.default_rng(0).integers(1, 60, size=200)
    tokens = np.random.default_rng(1).integers(0, 900, size=int(lengths.sum())).astype(np.uint16)
    p = str(tmp_path / "corpus")
    with TokenWriter(p, dtype=np.uint16) as w:
        w.add_documents(tokens, lengths)
        w.finalize()
    return p


def test_rank0_builds_and_broadcasts(prefix, tmp_path):
    root = str(tmp_path)
    mp.spawn(_worker, args=(_free_port(), prefix, root, False), nprocs=2, join=True)
    a, b = np.load(f"{root}/shuffle0.npy"), np.load(f"{root}/shuffle1.npy")
    assert np.array_equal(a, b)
    assert np.array_equal(np.load(f"{root}/tokens0.npy"), np.load(f"{root}/tokens1.npy"))
    assert os.listdir(f"{root}/node0") == os.listdir(f"{root}/node1")  # both nodes now hold the entry
    single = NanosetBuilder(
        NanosetConfig([prefix], 16, seed=11, split="1", create_attention_mask=False, cache_dir=f"{root}/x")
    ).build([300])[0]
    assert np.array_equal(single.shuffle_index, a)


def test_ranks_must_agree_on_the_key(prefix, tmp_path):
    root = str(tmp_path)
    mp.spawn(_worker, args=(_free_port(), prefix, root, True), nprocs=2, join=True)
    for rank in range(2):
        with open(f"{root}/error{rank}.txt") as f:
            assert "ranks disagree on the Nanoset index key" in f.read()
