"""`energon-arrow prepare` under torch.distributed: 2 local ranks (gloo on loopback), rank 0 writes the index."""

import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from energon_arrow.index.prepare import PrepareOptions, prepare_dataset
from energon_arrow.meta import parse_split_ratio
from energon_arrow.testing.synthetic import write_webdataset

pytestmark = pytest.mark.distributed


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rows(root):
    with sqlite3.connect(os.path.join(root, ".nv-meta", "index.sqlite")) as db:
        return sorted(db.execute("SELECT * FROM samples")), sorted(db.execute("SELECT * FROM sample_parts"))


def _run_ranks(root: str, *args: str) -> list[tuple[int, str, str]]:
    """`energon-arrow prepare ROOT ARGS` as the 2 ranks of a local torch.distributed job: (rc, stdout, stderr)."""
    port = _free_port()
    procs = []
    for rank in range(2):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", RANK=str(rank))
        env.update(LOCAL_RANK=str(rank), GLOO_SOCKET_IFNAME="lo")
        cmd = [
            sys.executable,
            "-m",
            "energon_arrow",
            "prepare",
            root,
            "--non-interactive",
            "--no-progress",
            *args,
        ]
        procs.append(
            subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
    outs = [p.communicate(timeout=240) for p in procs]
    return [(p.returncode, out, err) for p, (out, err) in zip(procs, outs)]


def test_two_ranks_prepare_like_one_process(tmp_path):
    dist_root, single_root = str(tmp_path / "dist"), str(tmp_path / "single")
    for root in (dist_root, single_root):
        write_webdataset(root, shards=5, samples_per_shard=4, image_bytes=32)
    ranks = _run_ranks(dist_root, "--split-ratio", "8,1,1", "--num-workers", "1")
    for rc, _, err in ranks:
        assert rc == 0, err
    assert "Prepared" in ranks[0][1] and "Prepared" not in ranks[1][1]  # only rank 0 reports
    prepare_dataset(single_root, PrepareOptions(split_ratio=parse_split_ratio("8,1,1")))
    assert _rows(dist_root) == _rows(single_root)
    for name in (".nv-meta/.info.json", ".nv-meta/split.yaml", "shards/shard-000001.tar.idx"):  # 1: rank 1's
        assert Path(dist_root, name).read_bytes() == Path(single_root, name).read_bytes()


def test_rank_failure_fails_every_rank(tmp_path):
    root = str(tmp_path / "dist")
    write_webdataset(root, shards=3, samples_per_shard=4, image_bytes=32)
    with open(os.path.join(root, "shards", "shard-000001.tar"), "r+b") as f:
        f.truncate(700)  # rank 1 indexes this one
    ranks = _run_ranks(root, "--split-ratio", "1,0,0")
    assert all(rc != 0 for rc, _, _ in ranks), ranks
    assert "shard-000001.tar" in ranks[0][2] and "truncated" in ranks[0][2]
    assert not os.path.exists(os.path.join(root, ".nv-meta", ".info.json"))  # nothing published
