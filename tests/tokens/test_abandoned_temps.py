"""What a SIGKILLed token writer, preprocess or Nanoset cache build leaves behind (a temporary .bin/.idx beside
the output, a spool or part folder, a cache staging folder) is removed by the next run (found by the kill -9 suite
in tests/reliability: before, every killed run left its temporary files forever)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import numpy as np

from energon_arrow.adapters.publish import private_prefix
from energon_arrow.tokens.builder import TokenWriter


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def abandoned(prefix: str, pid: int) -> str:
    return f"{prefix}{socket.gethostname()}-{pid}-0123456789ab"


def test_killed_writers_leftovers_are_removed_by_the_next_writer(tmp_path):
    pid = dead_pid()
    final = tmp_path / "out.bin"
    leftover = tmp_path / abandoned("out.bin.tmp-", pid)
    leftover.write_bytes(b"half a .bin")
    spool = tmp_path / "spool"
    spool.mkdir()
    spool_left = spool / abandoned("ea-tokens-", pid)
    spool_left.mkdir()
    (spool_left / "lengths").write_bytes(b"x")
    alive = tmp_path / f"out.bin.tmp-{private_prefix('')}0123456789ab"  # this process: still writing
    alive.write_bytes(b"in progress")
    with TokenWriter(str(tmp_path / "out"), dtype=np.uint16, spool_dir=str(spool)) as w:
        w.add_document(np.arange(5))
        w.finalize()
    assert final.exists() and not leftover.exists() and not spool_left.exists()
    assert alive.exists()
    assert not [n for n in os.listdir(spool)]  # its own spool is gone too


def test_killed_nanoset_cache_build_staging_is_removed(tmp_path):
    from energon_arrow.tokens.nanoset_cache import IndexCache

    cache = IndexCache(str(tmp_path))
    left = tmp_path / abandoned("k-f.tmp-", dead_pid())
    left.mkdir()
    (left / "sample_index.npy").write_bytes(b"half")
    cache.store("k-f", {"a": np.arange(3)}, {"files": {}})
    assert sorted(os.listdir(tmp_path)) == ["k-f"]
    assert cache.load("k-f")["a"].tolist() == [0, 1, 2]
