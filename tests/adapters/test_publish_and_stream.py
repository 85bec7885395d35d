"""Atomic publication (local folder swap, failure leaves the old set) and the sequential stream."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from energon_arrow.adapters import NotFound, StorageError, open_storage


def test_local_publish_swaps_whole_sets_for_snapshot_readers(tmp_path):
    store = open_storage(str(tmp_path))
    store.publish_folder("meta", {"a": b"0", "b": b"0", "c": b"0"})
    stop = threading.Event()
    seen, problems = set(), []

    def reader():  # a reader that pins the folder it opened (dir fd) must see one version for all files
        while not stop.is_set():
            try:
                dfd = os.open(tmp_path / "meta", os.O_RDONLY | os.O_DIRECTORY)
            except FileNotFoundError:
                problems.append("folder missing")
                continue
            try:
                values = set()
                for name in "abc":
                    fd = os.open(name, os.O_RDONLY, dir_fd=dfd)
                    values.add(os.read(fd, 16))
                    os.close(fd)
            except FileNotFoundError:
                continue  # the old set was removed after the swap: a fresh open sees the new one
            finally:
                os.close(dfd)
            if len(values) != 1:
                problems.append(values)
            seen.update(values)

    t = threading.Thread(target=reader)
    t.start()
    try:
        for version in range(1, 40):
            v = str(version).encode()
            store.publish_folder("meta", {"a": v, "b": v, "c": v})
    finally:
        stop.set()
        t.join()
    assert not problems
    assert store.read_bytes("meta/a") == b"39"
    assert sorted(os.listdir(tmp_path)) == ["meta"]  # no staging folders left behind


def test_local_publish_failure_keeps_old_set(tmp_path):
    store = open_storage(str(tmp_path))
    store.publish_folder("meta", {"index.sqlite": b"old", "info.yaml": b"old"})
    with pytest.raises(NotFound, match=r"/meta"):
        store.publish_folder("meta", {"info.yaml": b"new", "index.sqlite": tmp_path / "does-not-exist"})
    assert store.read_bytes("meta/info.yaml") == b"old" and store.read_bytes("meta/index.sqlite") == b"old"
    assert sorted(os.listdir(tmp_path)) == ["meta"]


def test_local_publish_moves_files_in_and_never_writes_through_old_links(tmp_path):
    store = open_storage(str(tmp_path / "root"))
    store.publish_folder("m", {"sub/x.bin": b"old", "keep.txt": b"user"})
    old_inode = os.stat(tmp_path / "root/m/sub/x.bin").st_ino
    big = tmp_path / "big.bin"
    big.write_bytes(b"moved")
    store.publish_folder("m", {"sub/x.bin": b"new", "big.bin": big})
    assert store.read_bytes("m/sub/x.bin") == b"new" and store.read_bytes("m/big.bin") == b"moved"
    assert store.read_bytes("m/keep.txt") == b"user" and not big.exists()
    assert os.stat(tmp_path / "root/m/sub/x.bin").st_ino != old_inode


@pytest.mark.parametrize("name", ["../x", "/abs", "a//b", ""])
def test_publish_rejects_names_outside_the_folder(any_storage, name):
    with pytest.raises(StorageError, match="names must be relative paths"):
        any_storage.publish_folder("meta", {name: b"x"})


def test_write_atomic_overwrites_and_leaves_no_temp(any_storage):
    any_storage.write_atomic("d/f.txt", "one")
    any_storage.write_atomic("d/f.txt", b"two")
    assert any_storage.read_text("d/f.txt") == "two"
    assert any_storage.list_files("d/**") == ["d/f.txt"]


def test_put_objects_writes_many_and_listings_see_them(any_storage, monkeypatch):
    from energon_arrow.adapters import publish

    if any_storage.is_local:
        pytest.skip("object stores only")
    assert any_storage.list_files("idx/**") == [] and not any_storage.exists("idx/a0.idx")
    items = {f"idx/a{i}.idx": bytes([i]) * (100 + i) for i in range(20)}
    publish.put_objects(any_storage, items)
    assert any_storage.exists("idx/a0.idx")  # no stale "missing" answer from a listings cache
    assert any_storage.list_files("idx/**") == sorted(items)
    assert all(any_storage.read_bytes(rel) == data for rel, data in items.items())
    monkeypatch.setattr(publish, "DIRECT_PUT_LIMIT", 150)  # the larger half through s3fs, the rest direct
    items = {rel: data[::-1] + b"2" for rel, data in items.items()}
    publish.put_objects(any_storage, items)
    assert all(any_storage.read_bytes(rel) == data for rel, data in items.items())


def test_read_text_reports_bad_encoding_offset(any_storage):
    any_storage.write_atomic("t.txt", b"ok\xff")
    with pytest.raises(StorageError, match=r"t\.txt: not valid utf-8 at byte offset 2"):
        any_storage.read_text("t.txt")


def test_stream_skip_readinto_tell_and_eof(any_storage):
    data = np.random.default_rng(3).bytes(100_003)
    any_storage.write_atomic("s.bin", data)
    with any_storage.open_stream("s.bin", block_size=4096, depth=3) as f:
        assert f.read(10) == data[:10]
        assert f.size == len(data)
        f.skip(50_000)
        assert f.tell() == 50_010
        buf = bytearray(9000)
        assert f.readinto(buf) == 9000 and bytes(buf) == data[50_010:59_010]
        assert f.seek(60_000) == 60_000
        assert f.read() == data[60_000:]
        assert f.read(10) == b""
        with pytest.raises(EOFError, match=r"s\.bin: cannot skip to offset 100013"):
            f.skip(10)


def test_stream_of_empty_and_missing_files(any_storage):
    any_storage.write_atomic("empty.bin", b"")
    with any_storage.open_stream("empty.bin") as f:
        assert f.read() == b""
    assert list(any_storage.iter_chunks("empty.bin")) == []
    with pytest.raises(NotFound, match=r"nope\.bin"):
        any_storage.open_stream("nope.bin")


def test_read_ranges_edge_cases(any_storage):
    data = any_storage.write_atomic("e.bin", b"0123456789") or b"0123456789"
    assert any_storage.read_ranges("e.bin", [], []) == []
    assert [bytes(v) for v in any_storage.read_ranges("e.bin", [3, 3, 0], [0, 7, 10])] == [
        b"",
        data[3:],
        data,
    ]
    with pytest.raises(StorageError, match=r"e\.bin: short read: wanted .* at offset 8"):
        any_storage.read_ranges("e.bin", [8], [5])
    with pytest.raises(NotFound, match=r"missing\.bin"):
        any_storage.read_ranges(["e.bin", "missing.bin"], [0, 0], [1, 1])
    with pytest.raises(ValueError, match="2 paths for 1 ranges"):
        any_storage.read_ranges(["e.bin", "e.bin"], [0], [1])


def test_publish_moves_local_files_into_any_store(any_storage, tmp_path, monkeypatch):
    from energon_arrow.adapters import publish

    src = tmp_path / "index.sqlite"
    if not any_storage.is_local:  # a large file: a multipart upload of 3 parts (S3 parts are 5 MiB at least)
        monkeypatch.setattr(publish, "DIRECT_FILE_PUT_LIMIT", 0)
        monkeypatch.setattr(publish, "MULTIPART_PART_SIZE", 5 << 20)
        big = np.random.default_rng(5).bytes(11 << 20)
        src.write_bytes(big)
        any_storage.publish_folder("meta", {"index.sqlite": src})
        assert any_storage.read_bytes("meta/index.sqlite") == big and not src.exists()
    src.write_bytes(b"sqlite" * 1000)
    any_storage.publish_folder("meta", {"index.sqlite": src, "info.json": b"{}"})
    assert any_storage.read_bytes("meta/index.sqlite") == b"sqlite" * 1000 and not src.exists()
    with pytest.raises(NotFound, match=r"meta"):
        any_storage.publish_folder("meta", {"info.json": b"new", "index.sqlite": tmp_path / "gone.sqlite"})
    assert any_storage.read_bytes("meta/index.sqlite") == b"sqlite" * 1000
    assert any_storage.read_bytes("meta/info.json") == b"{}"  # nothing of the failed set was written


@pytest.mark.parametrize("exchange", [True, False])
def test_local_publish_without_rename_exchange_and_with_the_old_set_left_to_the_caller(
    tmp_path, monkeypatch, exchange
):
    from energon_arrow.adapters import publish

    if not exchange:
        monkeypatch.setattr(publish, "_rename_exchange", lambda a, b: False)  # kernels/filesystems without it
    store = open_storage(str(tmp_path))
    assert store.publish_folder("m", {"a": b"1"}) is None
    store.publish_folder("m", {"a": b"2"})
    assert store.read_bytes("m/a") == b"2" and sorted(os.listdir(tmp_path)) == ["m"]
    store.publish_folder("m", {"d/x": b"x", "d/y": b"y", "e/z": b"z", "keep": b"k"})
    old = store.publish_folder("m", {"a": b"3"}, drop=["d/x", "e"], remove_old=False)
    assert sorted(os.listdir(old)) == ["a", "d", "e", "keep"] and open_storage(old).read_bytes("a") == b"2"
    assert store.list_files("m/**") == ["m/a", "m/d/y", "m/keep"] and store.read_bytes("m/a") == b"3"


def test_stream_wrapped_in_a_buffered_reader_seeks_forward(any_storage):
    import io

    data = b"".join(b"line %d\n" % i for i in range(20_000))
    any_storage.write_atomic("lines.txt", data)
    with io.BufferedReader(any_storage.open_stream("lines.txt", block_size=8192), 4096) as f:
        assert f.readline() == b"line 0\n"
        f.seek(data.index(b"line 15000\n"))
        assert f.readline() == b"line 15000\n"
        assert sum(1 for _ in f) == 20_000 - 15_001


def test_local_publish_removes_staging_abandoned_by_a_crash(tmp_path):
    store = open_storage(str(tmp_path))
    old = tmp_path / ".meta.staging-deadbeef0000"
    old.mkdir()
    (old / "half.sqlite").write_bytes(b"half")
    os.utime(old, (1, 1))
    recent = tmp_path / ".meta.staging-0123456789ab"  # maybe a publisher running right now: left alone
    recent.mkdir()
    store.publish_folder("meta", {"a": b"1"})
    assert not old.exists() and recent.exists()
