"""Shared fixtures: storage roots on local disk, in memory and on a real SeaweedFS S3 server."""

from __future__ import annotations

import uuid

import fsspec
import pytest

from energon_arrow.adapters import open_storage


@pytest.fixture(scope="session", autouse=True)
def _node_cache(tmp_path_factory):
    """Node-local caches (the loader's row indexes of remote datasets, Nanoset indexes) under the session's
    temporary folder instead of ~/.cache."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ENERGON_ARROW_CACHE", str(tmp_path_factory.mktemp("node-cache")))
        yield


@pytest.fixture(scope="session")
def s3_server():
    """One real SeaweedFS server (S3 gateway) per test session on random loopback ports."""
    from energon_arrow.testing.seaweedfs import start_seaweedfs

    server = start_seaweedfs()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def proxy(s3_server):
    """A FaultProxy in front of the session's SeaweedFS, one per test module (its queued faults and counts stay
    within the module)."""
    from energon_arrow.testing.faultproxy import FaultProxy

    with FaultProxy(s3_server.endpoint_url) as p:
        yield p


@pytest.fixture(scope="session")
def s3_iam_server():
    """A second SeaweedFS started with `-s3.config` identities: wrong secrets and missing rights give 403."""
    from energon_arrow.testing.seaweedfs import start_seaweedfs

    server = start_seaweedfs(iam=True)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_root(s3_server):
    """A fresh `s3://bucket/prefix` URL and its storage options."""
    bucket = s3_server.create_bucket("ea-tests")
    return f"s3://{bucket}/{uuid.uuid4().hex[:12]}", s3_server.storage_options


@pytest.fixture
def memory_root():
    url = f"memory://ea-{uuid.uuid4().hex[:12]}"
    yield url, {}
    fs = fsspec.filesystem("memory")
    if fs.exists(url):
        fs.rm(url, recursive=True)


@pytest.fixture
def local_root(tmp_path):
    return str(tmp_path / "root"), {}


@pytest.fixture(params=["local", "memory", pytest.param("s3", marks=pytest.mark.s3)])
def any_root(request):
    """The same test against local disk, memory:// and SeaweedFS S3 (the shared backend suite). The s3 case
    carries the `s3` mark from collection on, so `-m "not s3"` deselects it."""
    return request.getfixturevalue(f"{request.param}_root")


@pytest.fixture
def any_storage(any_root):
    url, options = any_root
    storage = open_storage(url, options)
    storage.makedirs("")
    return storage


@pytest.fixture
def cli(capsys):
    """`energon-arrow ARGS` in-process through the entry point: (exit code, stdout, stderr)."""
    import subprocess

    from energon_arrow.cli.main import main

    def run(*args: str) -> subprocess.CompletedProcess:
        code = 0
        try:
            main([*args])
        except SystemExit as exc:
            code = exc.code or 0
        out = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, out.out, out.err)

    return run
