"""`energon-arrow prepare` under torch.distributed: 2 local ranks (gloo on loopback), rank 0 writes the index."""

import os
import socket
import sqlite3
import subprocess
import sys

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


def test_two_ranks_prepare_like_one_process(tmp_path):
    dist_root, single_root = str(tmp_path / "dist"), str(tmp_path / "single")
    for root in (dist_root, single_root):
        write_webdataset(root, shards=5, samples_per_shard=4, image_bytes=32)
    port = _free_port()
    procs = []
    for rank in range(2):
        env = dict(
            os.environ,
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            WORLD_SIZE="2",
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            GLOO_SOCKET_IFNAME="lo",
        )
        cmd = [
            sys.executable,
            "-m",
            "energon_arrow",
            "prepare",
            dist_root,
            "--non-interactive",
            "--split-ratio",
            "8,1,1",
            "--no-progress",
            "--num-workers",
            "1",
        ]
        procs.append(
            subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
    outs = [p.communicate(timeout=240) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err
    assert "Prepared" in outs[0][0] and "Prepared" not in outs[1][0]  # only rank 0 reports
    prepare_dataset(single_root, PrepareOptions(split_ratio=parse_split_ratio("8,1,1")))
    assert _rows(dist_root) == _rows(single_root)
    for name in (".info.json", "split.yaml"):
        with (
            open(os.path.join(dist_root, ".nv-meta", name), "rb") as a,
            open(os.path.join(single_root, ".nv-meta", name), "rb") as b,
        ):
            assert a.read() == b.read()
    shard = "shards/shard-000001.tar.idx"  # indexed by rank 1
    with open(os.path.join(dist_root, shard), "rb") as a, open(os.path.join(single_root, shard), "rb") as b:
        assert a.read() == b.read()


def test_rank_failure_fails_every_rank(tmp_path):
    root = str(tmp_path / "dist")
    write_webdataset(root, shards=3, samples_per_shard=4, image_bytes=32)
    with open(os.path.join(root, "shards", "shard-000001.tar"), "r+b") as f:
        f.truncate(700)  # rank 1 indexes this one
    port = _free_port()
    procs = []
    for rank in range(2):
        env = dict(
            os.environ,
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            WORLD_SIZE="2",
            RANK=str(rank),
            GLOO_SOCKET_IFNAME="lo",
        )
        cmd = [
            sys.executable,
            "-m",
            "energon_arrow",
            "prepare",
            root,
            "--non-interactive",
            "--split-ratio",
            "1,0,0",
            "--no-progress",
        ]
        procs.append(
            subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
    outs = [p.communicate(timeout=240) for p in procs]
    assert all(p.returncode != 0 for p in procs), outs
    assert "shard-000001.tar" in outs[0][1] and "truncated" in outs[0][1]
    assert not os.path.exists(os.path.join(root, ".nv-meta"))
