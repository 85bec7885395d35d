"""The direct S3 client in forked children (DataLoader workers): one per process, copied from the parent's."""

from __future__ import annotations

import gc
import os
import posixpath
import weakref

import pytest

from energon_arrow.adapters import open_storage, s3settings

pytestmark = pytest.mark.s3


def test_forked_child_copies_the_parents_client(s3_server, s3_object):
    bucket, key, data = s3_object
    folder, name = posixpath.split(key)
    options = {**s3_server.storage_options, "config_kwargs": {"retries": {"total_max_attempts": 1}}}
    store = open_storage(f"s3://{bucket}/{folder}", options)
    assert store.read_range(name, 5, 100) == data[5:105]
    parent = store._direct
    assert parent is not None
    # s3fs/botocore change the nested options they are given; the stored ones stay as given
    assert store.fs.info(f"{bucket}/{key}")["size"] == len(data)  # s3fs's botocore client is made here
    assert store._public["config_kwargs"] == {"retries": {"total_max_attempts": 1}}

    def child() -> bool:  # no new botocore session, its own client and connections
        s3settings._build_client = lambda options: (_ for _ in ()).throw(AssertionError("built again"))
        got = store.read_range(name, 7, 50)
        client = store._direct
        return got == data[7:57] and client is not parent and client._settings == parent._settings

    assert _true_in_forked_child(child)


def _true_in_forked_child(check) -> bool:
    """Whether `check()` returns True in a forked child (which exits without running the parent's cleanups)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        ok = False
        try:
            ok = check()
        finally:
            os.write(w, b"1" if ok else b"0")
            os._exit(0)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    ok = os.read(r, 1) == b"1" and status == 0
    os.close(r)
    return ok


def _pending_s3fs_closes() -> int:
    import s3fs

    close = s3fs.S3FileSystem.close_session
    return sum(info.func is close for info in weakref.finalize._registry.values())


def test_forked_child_does_not_close_the_parents_s3fs_sessions(s3_server, s3_object):
    """A child inherits the parent's s3fs filesystems; closing one there would wait for the parent's event loop
    (a second each) and touch the parent's connections: the child detaches those closes at fork."""
    bucket, key, data = s3_object
    store = open_storage(f"s3://{bucket}", s3_server.storage_options)
    assert store.fs.info(f"{bucket}/{key}")["size"] == len(data)  # the session (and its close) exists now
    assert _pending_s3fs_closes() >= 1
    assert _true_in_forked_child(lambda: gc.collect() >= 0 and _pending_s3fs_closes() == 0)
    assert _pending_s3fs_closes() >= 1  # the parent closes its own sessions as before
