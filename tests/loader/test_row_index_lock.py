"""The first build of a row index runs under a lock (loader/row_index.py `build_lock`): real processes opening a
dataset together build it once and all map that result; a builder killed mid-build leaves no index entry, does
not block the others (flock is released by the kernel) and the next opener builds it.

The dataset is a `memory://` copy (not local: its row index goes to the node-local cache, $ENERGON_ARROW_CACHE,
like a remote or read-only dataset's), made before the processes fork so that each sees it.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
import uuid

import fsspec
import pytest

from energon_arrow.loader import row_index
from energon_arrow.loader.source import open_split
from tests.loader.conftest import PER_SHARD
from tests.processes import run_collecting

CTX = mp.get_context("fork")
TRAIN_ROWS = 3 * PER_SHARD  # 3 of the 4 shards


@pytest.fixture
def remote_copy(prepared_root, tmp_path, monkeypatch):
    url = f"memory://ea-lock-{uuid.uuid4().hex[:12]}/ds"
    fs = fsspec.filesystem("memory")
    fs.put(prepared_root, url, recursive=True)
    cache = tmp_path / "cache"
    monkeypatch.setenv("ENERGON_ARROW_CACHE", str(cache))
    yield url, str(tmp_path / "builds.log"), str(cache / "rows")
    fs.rm(url.rsplit("/", 1)[0], recursive=True)


def _open(url: str, log: str, barrier=None, started=None, hold: float = 0.0, results=None) -> None:
    """In a child process: open the train split, recording each row-index build in `log` (one line per build;
    `started` is set and the build held for `hold` seconds once the rows are written)."""
    real = row_index._write

    def counted(*args, **kwargs):
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        real(*args, **kwargs)
        if started is not None:
            started.set()
        time.sleep(hold)

    row_index._write = counted
    if barrier is not None:
        barrier.wait()
    src = open_split(url, "train")
    if results is not None:
        results.put((len(src), src.keys.to_pylist()[:3], src.byte_offset.table.filename))


def _builds(log: str) -> int:
    return len(open(log).read().split()) if os.path.exists(log) else 0


def _entries(rows: str) -> list[str]:
    return sorted(n for n in os.listdir(rows) if not n.endswith(".lock") and not n.startswith("."))


def test_processes_opening_together_build_once(remote_copy):
    url, log, rows = remote_copy
    barrier, results = CTX.Barrier(3), CTX.Queue()
    # each build is held 0.5 s: without the lock all three would build
    procs = [CTX.Process(target=_open, args=(url, log, barrier, None, 0.5, results)) for _ in range(3)]
    got = run_collecting(procs, results, timeout=120)
    assert _builds(log) == 1
    assert len(_entries(rows)) == 1
    assert all(g == got[0] for g in got) and got[0][0] == TRAIN_ROWS
    assert got[0][2].startswith(os.path.join(rows, _entries(rows)[0]))  # all map the one cache entry


def test_killed_builder_leaves_no_entry_and_the_next_opener_builds(remote_copy):
    url, log, rows = remote_copy
    started = CTX.Event()
    builder = CTX.Process(target=_open, args=(url, log, None, started, 600.0))
    builder.start()
    assert started.wait(120)  # rows written into its temporary folder, lock held
    results = CTX.Queue()
    waiter = CTX.Process(target=_open, args=(url, log, None, None, 0.0, results))
    waiter.start()
    time.sleep(0.3)
    assert waiter.is_alive() and _builds(log) == 1  # waiting for the lock
    os.kill(builder.pid, signal.SIGKILL)
    builder.join(60)
    got = results.get(timeout=120)  # the lock was released by the kernel: the waiter builds
    waiter.join(60)
    assert waiter.exitcode == 0 and got[0] == TRAIN_ROWS
    assert _builds(log) == 2
    assert len(_entries(rows)) == 1
    assert not [n for n in os.listdir(rows) if ".rows-" in n]  # the killed build's folder removed
    again = CTX.Process(target=_open, args=(url, log, None, None, 0.0, None))
    again.start()
    again.join(60)
    assert again.exitcode == 0 and _builds(log) == 2  # mapped, not built


def test_killed_builder_alone_leaves_no_entry(remote_copy):
    url, log, rows = remote_copy
    started = CTX.Event()
    builder = CTX.Process(target=_open, args=(url, log, None, started, 600.0))
    builder.start()
    assert started.wait(120)
    os.kill(builder.pid, signal.SIGKILL)
    builder.join(60)
    assert _entries(rows) == []  # only the lock file and the abandoned temporary folder
    assert len([n for n in os.listdir(rows) if ".rows-" in n]) == 1
    assert len(open_split(url, "train")) == TRAIN_ROWS
    assert len(_entries(rows)) == 1
    assert not [n for n in os.listdir(rows) if ".rows-" in n]
