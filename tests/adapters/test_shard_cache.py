"""The node-local shard cache: fills, sharing between processes, eviction, damaged entries."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import uuid

import pytest

from energon_arrow.adapters import InvalidStorageOptions, open_storage
from energon_arrow.adapters.shard_cache import ShardCache
from energon_arrow.testing.faultproxy import FaultProxy
from energon_arrow.testing.seaweedfs import ACCESS_KEY, SECRET_KEY
from tests.processes import run_collecting


def _memory_store(memory_root, cache_dir, max_bytes=1 << 20):
    url, _ = memory_root
    store = open_storage(url, {"local_cache": {"path": str(cache_dir), "max_bytes": max_bytes}})
    store.makedirs("")
    return store


def _read(path, n=-1) -> bytes:
    with open(path, "rb") as f:
        return f.read(n)


def _put(store, rel, data):
    with store.fs.open(store.path_of(rel), "wb") as f:
        f.write(data)


def test_option_is_checked(tmp_path, memory_root):
    url, _ = memory_root
    with pytest.raises(InvalidStorageOptions, match="local_cache is for object stores"):
        open_storage(str(tmp_path), {"local_cache": str(tmp_path / "c")})
    with pytest.raises(InvalidStorageOptions, match="max_bytes must be a positive integer"):
        open_storage(url, {"local_cache": {"path": str(tmp_path / "c"), "max_bytes": 0}})
    with pytest.raises(InvalidStorageOptions, match="got keys"):
        open_storage(url, {"local_cache": {"folder": str(tmp_path)}})
    store = open_storage(url, {"local_cache": str(tmp_path / "c")})
    assert store.local_cache.path == str(tmp_path / "c") and store.local_cache.max_bytes > 0


def test_fill_then_hit(tmp_path, memory_root):
    store = _memory_store(memory_root, tmp_path / "c")
    _put(store, "a.tar", b"x" * 1000)
    cache = ShardCache(store.local_cache)
    path = cache.local_copy(store, "a.tar")
    assert _read(path) == b"x" * 1000
    store.fs.rm(store.path_of("a.tar"))  # a hit needs no remote access
    assert ShardCache(store.local_cache).local_copy(store, "a.tar") == path


def test_eviction_keeps_the_cache_under_its_budget(tmp_path, memory_root):
    store = _memory_store(memory_root, tmp_path / "c", max_bytes=2500)
    cache = ShardCache(store.local_cache)
    for i in range(4):
        _put(store, f"{i}.tar", bytes([i]) * 1000)
        cache.local_copy(store, f"{i}.tar")
        assert sum(size for _, size, _ in cache.entries()) <= 2500
    kept = sorted(_read(p, 1) for p, _, _ in cache.entries())
    assert kept == [b"\x02", b"\x03"]  # least recently used first out
    with pytest.raises(Exception, match="do not fit the local cache"):
        _put(store, "big.tar", b"b" * 3000)
        cache.local_copy(store, "big.tar")


def test_eviction_looks_at_the_entries_once_per_256th_of_the_budget(tmp_path, memory_root):
    """Listing every entry after every fill made a first epoch O(shards^2); the cache now looks after each
    1/256 of max_bytes filled, so it stays within max_bytes plus that much plus one file."""
    budget = 256 * 4000  # looks after every 4 fills of 1000 bytes
    store = _memory_store(memory_root, tmp_path / "c", max_bytes=budget)
    cache = ShardCache(store.local_cache)
    looks = []
    entries = cache.entries
    cache.entries = lambda: looks.append(1) or entries()
    for i in range(20):
        _put(store, f"{i}.tar", bytes([i]) * 1000)
        cache.local_copy(store, f"{i}.tar")
    assert len(looks) == 5
    tight = _memory_store(memory_root, tmp_path / "t", max_bytes=2 * 1000 + 500)  # looks after every fill
    cache = ShardCache(tight.local_cache)
    for i in range(20):
        _put(tight, f"{i}.tar", bytes([i]) * 1000)
        cache.local_copy(tight, f"{i}.tar")
        assert sum(size for _, size, _ in cache.entries()) <= 2 * 1000 + 500  # each fill is over 1/256


def _flip(path, keep_mtime=False):
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(100)
        f.write(b"\xff")
    if keep_mtime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.parametrize("damage", ["flip", "truncate", "replace"])
def test_damaged_entry_is_ignored_and_fetched_again(tmp_path, memory_root, damage):
    """Damage after the fill marked the entry verified changes its identity: the next user checks it in full."""
    store = _memory_store(memory_root, tmp_path / "c")
    _put(store, "a.tar", bytes(range(256)) * 4)
    path = ShardCache(store.local_cache).local_copy(store, "a.tar")
    assert os.path.exists(path + ".verified")
    if damage == "flip":
        _flip(path)
    elif damage == "truncate":
        os.truncate(path, 500)
    else:  # another file of the same size and times renamed over it
        st = os.stat(path)
        (tmp_path / "other").write_bytes(b"z" * st.st_size)
        os.utime(tmp_path / "other", ns=(st.st_atime_ns, st.st_mtime_ns))
        os.replace(tmp_path / "other", path)
    again = ShardCache(store.local_cache).local_copy(store, "a.tar")  # a new process checks entries again
    assert _read(again) == bytes(range(256)) * 4


def _bytes_read_by_local_copy(store, rel, results):
    def rchar():
        with open("/proc/self/io") as f:
            return int(next(line for line in f if line.startswith("rchar:")).split()[1])

    before = rchar()
    path = ShardCache(store.local_cache).local_copy(store, rel)
    results.put((path, rchar() - before))


def test_verified_once_per_node(tmp_path, memory_root):
    """A process using an entry that another process filled (and so verified) does not read it to check it;
    without the marker it reads it whole; a change that keeps the entry's identity (a write whose mtime is put
    back) is not detected until the markers are deleted (the documented limit)."""
    store = _memory_store(memory_root, tmp_path / "c", max_bytes=16 << 20)
    data = os.urandom(4 << 20)
    _put(store, "a.tar", data)
    path = ShardCache(store.local_cache).local_copy(store, "a.tar")
    ctx = multiprocessing.get_context("fork")

    def child_reads():
        results = ctx.Queue()
        proc = ctx.Process(target=_bytes_read_by_local_copy, args=(store, "a.tar", results))
        [(got, nread)] = run_collecting([proc], results)
        assert got == path
        return nread

    assert child_reads() < 64 * 1024  # the marker (and directory listings), not the 4 MiB entry
    os.unlink(path + ".verified")
    assert child_reads() >= len(data)  # checked in full, and marked again
    assert child_reads() < 64 * 1024
    _flip(path, keep_mtime=True)
    assert _read(ShardCache(store.local_cache).local_copy(store, "a.tar")) != data  # trusted: not detected
    os.unlink(path + ".verified")
    assert _read(ShardCache(store.local_cache).local_copy(store, "a.tar")) == data


def test_lock_of_a_dead_process_is_taken_over(tmp_path, memory_root):
    store = _memory_store(memory_root, tmp_path / "c")
    _put(store, "a.tar", b"y" * 100)
    cache = ShardCache(store.local_cache)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    import hashlib
    import socket

    key = hashlib.sha256(store.url_of("a.tar").encode()).hexdigest()[:32]
    os.makedirs(tmp_path / "c" / key[:2], exist_ok=True)
    (tmp_path / "c" / key[:2] / f"{key}.lock").write_text(f"{socket.gethostname()} {dead.pid}")
    assert _read(cache.local_copy(store, "a.tar")) == b"y" * 100


def _fill_in_child(store, rel, barrier, results):
    barrier.wait()
    path = ShardCache(store.local_cache).local_copy(store, rel)
    results.put(_read(path))


@pytest.mark.s3
def test_concurrent_fills_by_two_processes_fetch_once(s3_server, tmp_path):
    bucket = s3_server.create_bucket("ea-tests")  # one bucket: the test server has room for few (-volume.max)
    prefix = uuid.uuid4().hex[:12]
    data = os.urandom(3 * 1024 * 1024 + 17)
    open_storage(f"s3://{bucket}/{prefix}", s3_server.storage_options).write_atomic(
        "shard.tar", data
    )  # retried
    with FaultProxy(s3_server.endpoint_url) as proxy:
        options = {"endpoint_url": proxy.endpoint_url, "key": ACCESS_KEY, "secret": SECRET_KEY}
        store = open_storage(f"s3://{bucket}/{prefix}", {**options, "local_cache": str(tmp_path / "c")})
        ctx = multiprocessing.get_context("fork")
        barrier, results = ctx.Barrier(2), ctx.Queue()
        procs = [
            ctx.Process(target=_fill_in_child, args=(store, "shard.tar", barrier, results)) for _ in range(2)
        ]
        got = run_collecting(procs, results)
        assert got == [data, data]
        gets = [r for r in proxy.requests if r[0] == "GET"]
        assert len(gets) == 1  # one 8 MiB-block stream, fetched by one of the two processes
        assert len(ShardCache(store.local_cache).entries()) == 1


@pytest.mark.s3
def test_fill_retries_transient_faults(s3_server, tmp_path):
    from energon_arrow.adapters import RetryPolicy

    bucket = s3_server.create_bucket("ea-tests")  # one bucket: the test server has room for few (-volume.max)
    prefix = uuid.uuid4().hex[:12]
    data = os.urandom(100_000)
    open_storage(f"s3://{bucket}/{prefix}", s3_server.storage_options).write_atomic("shard.tar", data)
    with FaultProxy(s3_server.endpoint_url) as proxy:
        options = {"endpoint_url": proxy.endpoint_url, "key": ACCESS_KEY, "secret": SECRET_KEY}
        fast = RetryPolicy(attempts=4, base_delay=0.01, max_delay=0.05)
        store = open_storage(
            f"s3://{bucket}/{prefix}", {**options, "local_cache": str(tmp_path / "c")}, retry=fast
        )
        proxy.inject("slowdown", "reset", "error500")
        assert _read(ShardCache(store.local_cache).local_copy(store, "shard.tar")) == data
        assert sum(1 for r in proxy.requests if r[3] != "forwarded") == 3
