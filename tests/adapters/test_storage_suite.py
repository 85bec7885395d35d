"""The shared adapter suite: every test runs against local disk, memory:// and SeaweedFS S3."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from energon_arrow.adapters import NotFound, NotLocal, StorageError, open_storage


def put(storage, rel, data: bytes):
    storage.write_atomic(rel, data)
    return data


def test_write_read_roundtrip(any_storage):
    data = put(any_storage, "a/b/file.bin", bytes(range(256)) * 40)
    assert any_storage.read_bytes("a/b/file.bin") == data
    assert any_storage.exists("a/b/file.bin")
    assert not any_storage.exists("a/b/missing.bin")


def test_stat_reports_size_and_identity(any_storage):
    put(any_storage, "x.tar", b"0" * 1234)
    info = any_storage.stat("x.tar")
    assert info.path == "x.tar" and info.size == 1234
    assert info.mtime is not None or info.etag is not None
    put(any_storage, "x.tar", b"1" * 1235)
    assert any_storage.stat("x.tar").identity != info.identity


def test_scan_recursive_glob_sorted(any_storage):
    for rel in ["b/2.tar", "a/1.tar", "top.tar", "a/deep/3.tar", "a/notes.txt"]:
        put(any_storage, rel, rel.encode())
    assert any_storage.list_files("**/*.tar") == ["a/1.tar", "a/deep/3.tar", "b/2.tar", "top.tar"]
    assert any_storage.list_files("a/*.tar") == ["a/1.tar"]
    assert [f.size for f in any_storage.scan("**/*.txt")] == [len(b"a/notes.txt")]


def test_scan_of_missing_root_is_empty_or_not_found(any_root):
    url, options = any_root
    storage = open_storage(url + "/never-created", options)
    try:
        assert storage.list_files("**/*.tar") == []
    except NotFound as exc:
        assert "never-created" in str(exc)


def test_read_range_and_short_read(any_storage):
    data = put(any_storage, "r.bin", np.arange(10000, dtype=np.uint16).tobytes())
    assert any_storage.read_range("r.bin", 100, 50) == data[100:150]
    assert any_storage.read_range("r.bin", 0, 0) == b""
    with pytest.raises(StorageError, match=r"r\.bin.*short read.*offset 19990"):
        any_storage.read_range("r.bin", 19990, 100)


def test_read_ranges_request_order_overlaps_and_coalescing(any_storage):
    data = put(any_storage, "r.bin", np.random.default_rng(0).bytes(1 << 20))
    rng = np.random.default_rng(1)
    offsets = rng.integers(0, (1 << 20) - 5000, 300)
    sizes = rng.integers(0, 5000, 300)
    got = any_storage.read_ranges("r.bin", offsets, sizes)
    assert [bytes(g) for g in got] == [data[o : o + s] for o, s in zip(offsets, sizes)]


def test_read_ranges_across_files(any_storage):
    a = put(any_storage, "a.bin", b"A" * 1000 + b"a" * 1000)
    b = put(any_storage, "b.bin", b"B" * 3000)
    got = any_storage.read_ranges(["a.bin", "b.bin", "a.bin"], [1000, 10, 0], [5, 20, 3])
    assert [bytes(g) for g in got] == [a[1000:1005], b[10:30], a[0:3]]


def test_open_stream_reads_everything_in_blocks(any_storage):
    data = put(any_storage, "s.bin", np.random.default_rng(2).bytes(300_001))
    with any_storage.open_stream("s.bin", block_size=65536) as f:
        parts = []
        while chunk := f.read(10_000):
            parts.append(chunk)
    assert b"".join(parts) == data
    assert b"".join(any_storage.iter_chunks("s.bin", block_size=70_000)) == data


def test_missing_file_errors_name_the_url(any_storage):
    for op in (
        lambda: any_storage.read_bytes("no/such.tar"),
        lambda: any_storage.stat("no/such.tar"),
        lambda: any_storage.read_range("no/such.tar", 0, 10),
    ):
        with pytest.raises(NotFound, match=r"no/such\.tar"):
            op()


def test_publish_folder_replaces_set_and_keeps_user_files(any_storage):
    any_storage.publish_folder("meta", {"a.json": b"1", "b.yaml": b"old"})
    put(any_storage, "meta/user.py", b"# user file")
    any_storage.publish_folder("meta", {"b.yaml": b"new", "c.sqlite": b"db"})
    assert any_storage.read_bytes("meta/b.yaml") == b"new"
    assert any_storage.read_bytes("meta/c.sqlite") == b"db"
    assert any_storage.read_bytes("meta/user.py") == b"# user file"
    assert any_storage.read_bytes("meta/a.json") == b"1"
    any_storage.publish_folder("meta", {"only.txt": b"x"}, keep_existing=False)
    assert any_storage.list_files("meta/**") == ["meta/only.txt"]


def test_pickle_roundtrip_keeps_access(any_storage):
    put(any_storage, "p.bin", b"pickled")
    clone = pickle.loads(pickle.dumps(any_storage))
    assert clone.read_bytes("p.bin") == b"pickled"
    assert clone.url == any_storage.url


def test_child_storage(any_storage):
    put(any_storage, "sub/dir/f.txt", b"hi")
    child = any_storage.child("sub")
    assert child.read_bytes("dir/f.txt") == b"hi"
    assert child.url.endswith("sub")


def test_mmap_is_local_only_and_zero_copy(any_storage):
    put(any_storage, "m.bin", np.arange(100, dtype=np.int32).tobytes())
    if not any_storage.is_local:
        with pytest.raises(NotLocal):
            any_storage.mmap("m.bin")
        return
    arr = any_storage.mmap("m.bin", np.int32)
    assert isinstance(arr, np.memmap) and not arr.flags.writeable
    assert arr[42] == 42
    assert any_storage.mmap("m.bin", np.int32, offset=8, count=3).tolist() == [2, 3, 4]
    put(any_storage, "empty.bin", b"")
    assert any_storage.mmap("empty.bin").size == 0
    with pytest.raises(StorageError, match="beyond size"):
        any_storage.mmap("m.bin", np.int32, count=101)


@pytest.mark.parametrize("gap, max_fetch", [(0, 1 << 20), (1 << 20, 4096), (1 << 20, 0)])
def test_read_ranges_under_every_coalescing_setting(any_storage, gap, max_fetch):
    data = put(any_storage, "c.bin", np.random.default_rng(5).bytes(300_000))
    rng = np.random.default_rng(6)
    offsets = np.concatenate([rng.integers(0, 290_000, 200), [0]])
    sizes = np.concatenate([rng.integers(0, 10_000, 200), [300_000]])  # and one range of the whole file
    any_storage.range_gap, any_storage.max_fetch = gap, max_fetch
    got = any_storage.read_ranges(["c.bin"] * offsets.size, offsets, sizes)
    assert [bytes(g) for g in got] == [data[o : o + s] for o, s in zip(offsets, sizes)]
    any_storage.use_direct_reads = False
    clone = pickle.loads(pickle.dumps(any_storage))  # the settings travel with the storage and its children
    assert (clone.range_gap, clone.max_fetch, clone.use_direct_reads) == (gap, max_fetch, False)
    child = any_storage.child("x")
    assert (child.range_gap, child.max_fetch, child.use_direct_reads) == (gap, max_fetch, False)
