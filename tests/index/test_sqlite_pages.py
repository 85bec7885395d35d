"""index.sqlite written page by page (energon_arrow.index.sqlite_pages) against SQLite's own inserts: same rows and
rowids, every index readable, `PRAGMA integrity_check` clean, for deep trees, overflow pages and the switch to
SQLite inserts when keys stop ascending."""

from __future__ import annotations

import os
import sqlite3

import numpy as np
import pyarrow as pa
import pytest

from energon_arrow.index.sqlite_pages import IndexPagesWriter, IndexSqliteWriter, page_writer_available
from energon_arrow.index.sqlite_writer import DuplicateKeyError, IndexSqliteBuilder
from energon_arrow.tar.samples import ShardIndex

QUERIES = (
    "SELECT rowid, * FROM samples ORDER BY rowid",
    "SELECT rowid, * FROM sample_parts ORDER BY rowid",
    "SELECT sample_key, rowid FROM samples INDEXED BY sqlite_autoindex_samples_1 ORDER BY sample_key",
    "SELECT tar_file_id, sample_index, rowid FROM samples INDEXED BY idx_samples_by_tar_and_idx "
    "WHERE tar_file_id >= 0 ORDER BY tar_file_id, sample_index",
    "SELECT tar_file_id, sample_index, content_byte_offset, rowid FROM sample_parts INDEXED BY idx_sample_parts_seq "
    "WHERE tar_file_id >= 0 ORDER BY tar_file_id, sample_index, content_byte_offset",
    "SELECT *, rowid FROM sample_parts INDEXED BY idx_sample_parts_full WHERE tar_file_id >= 0 "
    "ORDER BY tar_file_id, sample_index, part_name, content_byte_offset, content_byte_size",
    "SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY name",
)


def shard_index(
    keys: list[str], parts: list[list[str]], rng: np.random.Generator, big: bool = False
) -> ShardIndex:
    sizes = rng.integers(0, 1 << 40 if big else 5000, size=len(keys), dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes[:-1])]).astype(np.int64)
    counts = [len(p) for p in parts]
    part_sample = np.repeat(np.arange(len(keys), dtype=np.int64), counts)
    part_sizes = rng.integers(0, 3, size=len(part_sample), dtype=np.int64) * rng.integers(0, 1 << 33)
    part_offsets = np.sort(rng.integers(0, 1 << 42, size=len(part_sample), dtype=np.int64))
    return ShardIndex(
        sample_keys=pa.array(keys, pa.string()),
        sample_offsets=offsets,
        sample_sizes=sizes,
        part_sample_index=part_sample,
        part_names=pa.array([name for p in parts for name in p], pa.string()),
        part_offsets=part_offsets,
        part_sizes=part_sizes,
        data_end=int(offsets[-1] + sizes[-1]) if len(keys) else 0,
    )


def random_dataset(rng, shards: int, samples: int, key_len: int = 0, shuffle_within: bool = False):
    names = ["jpg", "txt", "json", "Ünï", "a.b", "", "x" * 40, "cls"]
    out = []
    for s in range(shards):
        n = int(rng.integers(1, samples + 1))
        keys = [f"{s:05d}/{i:06d}" + "k" * key_len for i in range(n)]
        if shuffle_within:
            rng.shuffle(keys)
        parts = [list(rng.choice(names, size=int(rng.integers(0, 5)))) for _ in range(n)]
        out.append((f"shards/{s:05d}.tar", shard_index(keys, parts, rng, big=s % 3 == 0)))
    return out


def test_the_compiled_writer_is_built():
    # an install without a C compiler still prepares (SQLite inserts), but this project's installs must build it
    assert page_writer_available()


def test_without_the_compiled_writer_sqlite_inserts_build_it(tmp_path, monkeypatch):
    from energon_arrow.index import sqlite_pages

    monkeypatch.setattr(sqlite_pages, "_native", None)
    dataset = random_dataset(np.random.default_rng(1), 4, 30)
    writer = IndexSqliteWriter(str(tmp_path / "ours.sqlite"))
    build(str(tmp_path / "ours.sqlite"), dataset, writer)
    assert not writer.paged
    reference = build(str(tmp_path / "ref.sqlite"), dataset, IndexSqliteBuilder(str(tmp_path / "ref.sqlite")))
    assert_same_database(str(tmp_path / "ours.sqlite"), reference)


def build(path, dataset, writer):
    for tar_file_id, (shard, index) in enumerate(dataset):
        writer.add_shard(tar_file_id, shard, index)
    writer.finish()
    return path


def assert_same_database(ours: str, reference: str) -> None:
    a, b = sqlite3.connect(ours), sqlite3.connect(reference)
    try:
        assert a.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        for query in QUERIES:
            assert a.execute(query).fetchall() == b.execute(query).fetchall(), query
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize(
    ("page_size", "shards", "samples", "key_len", "shuffle_within"),
    [
        (512, 40, 120, 0, False),  # deep trees: 4+ levels of small pages
        (1024, 25, 200, 0, True),  # keys sorted within each shard by the writer
        (4096, 30, 300, 0, False),
        (512, 12, 40, 300, False),  # keys past the local payload limit: overflow pages
        (4096, 6, 30, 5000, True),  # keys larger than a page: overflow chains
        (65536, 5, 50, 0, False),
    ],
)
def test_pages_match_sqlite_inserts(tmp_path, page_size, shards, samples, key_len, shuffle_within):
    rng = np.random.default_rng(page_size + shards + key_len)
    dataset = random_dataset(rng, shards, samples, key_len, shuffle_within)
    reference = build(str(tmp_path / "ref.sqlite"), dataset, IndexSqliteBuilder(str(tmp_path / "ref.sqlite")))
    writer = IndexSqliteWriter(str(tmp_path / "ours.sqlite"), page_size)
    ours = build(str(tmp_path / "ours.sqlite"), dataset, writer)
    assert writer.paged
    assert_same_database(ours, reference)
    with sqlite3.connect(ours) as db:
        assert db.execute("PRAGMA page_size").fetchone()[0] == page_size


def test_every_tree_size_around_page_boundaries(tmp_path):
    """1..N rows of one shard: each root is a leaf, then a leaf that just split, then deeper (borrowing at the end)."""
    rng = np.random.default_rng(7)
    for n in list(range(1, 40)) + [63, 64, 65, 127, 128, 129, 255, 256, 257]:
        dataset = [("a.tar", shard_index([f"{i:04d}" for i in range(n)], [["jpg", "txt"]] * n, rng))]
        ref = str(tmp_path / f"ref{n}.sqlite")
        build(ref, dataset, IndexSqliteBuilder(ref))
        ours = str(tmp_path / f"ours{n}.sqlite")
        build(ours, dataset, IndexPagesWriterAdapter(ours, 512))
        assert_same_database(ours, ref)


class IndexPagesWriterAdapter:
    """IndexPagesWriter with add_shard (asserting that every shard is taken page by page)."""

    def __init__(self, path, page_size):
        self.writer = IndexPagesWriter(path, page_size)

    def add_shard(self, tar_file_id, shard, index):
        assert self.writer.try_add_shard(tar_file_id, shard, index)

    def finish(self):
        self.writer.finish()


def test_empty_database(tmp_path):
    path = str(tmp_path / "empty.sqlite")
    IndexPagesWriter(path).finish()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert db.execute("SELECT count(*) FROM samples").fetchone() == (0,)


def test_keys_out_of_order_switch_to_sqlite_inserts(tmp_path):
    rng = np.random.default_rng(3)
    dataset = random_dataset(rng, 8, 60)
    dataset.insert(
        5, ("shards/early.tar", shard_index(["00000/zzz", "00000/zzzz"], [["jpg"], ["jpg", "txt"]], rng))
    )
    ref = str(tmp_path / "ref.sqlite")
    build(ref, dataset, IndexSqliteBuilder(ref))
    writer = IndexSqliteWriter(str(tmp_path / "ours.sqlite"), 512)
    ours = build(str(tmp_path / "ours.sqlite"), dataset, writer)
    assert not writer.paged
    assert_same_database(ours, ref)


def test_duplicate_key_after_the_switch_names_both_shards(tmp_path):
    rng = np.random.default_rng(4)
    first = shard_index(["k1", "k2"], [["jpg"], ["jpg"]], rng)
    second = shard_index(["k0", "k2"], [["jpg"], ["jpg"]], rng)
    writer = IndexSqliteWriter(str(tmp_path / "dup.sqlite"))
    writer.add_shard(0, "a.tar", first)
    with pytest.raises(DuplicateKeyError) as err:
        writer.add_shard(1, "b.tar", second)
    assert (err.value.key, err.value.shard, err.value.other) == ("k2", "b.tar", "a.tar")
    writer.add_shard(1, "c.tar", shard_index(["k3"], [["txt"]], rng))  # the duplicate shard was rolled back
    writer.finish()
    with sqlite3.connect(str(tmp_path / "dup.sqlite")) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert db.execute("SELECT sample_key, tar_file_id FROM samples ORDER BY rowid").fetchall() == [
            ("k1", 0),
            ("k2", 0),
            ("k3", 1),
        ]


def test_sqlite_appends_to_a_paged_database(tmp_path):
    """SQLite inserts and deletes in a file the page writer made (energon's tools may modify it)."""
    rng = np.random.default_rng(5)
    path = str(tmp_path / "x.sqlite")
    build(path, random_dataset(rng, 10, 80), IndexPagesWriterAdapter(path, 1024))
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO samples VALUES (99, 'zzz', 0, 0, 1)")
        db.execute("DELETE FROM sample_parts WHERE tar_file_id = 3")
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


def test_bad_columns_are_rejected(tmp_path):
    from energon_arrow.index import _sqlite_pages as native

    fd = os.open(str(tmp_path / "f"), os.O_RDWR | os.O_CREAT)
    try:
        w = native.open(fd, 4096, 8, b"ti")
        ints = ("i", np.arange(3, dtype=np.int64))
        with pytest.raises(ValueError, match="differ in length"):
            native.add(w, 0, (ints, ("i", np.arange(4, dtype=np.int64))), 1, None)
        with pytest.raises(IndexError, match="not a row"):
            native.add(w, 1, (ints,), 1, np.array([0, 1, 5], dtype=np.int64))
        with pytest.raises(TypeError, match="int64"):
            native.add(w, 0, (("i", np.arange(3, dtype=np.int32)),), 1, None)
        with pytest.raises(ValueError, match="out of range"):
            native.add(w, 0, (("t", np.array([0, 2, 9], dtype=np.int32), b"abc"),), 1, None)
        with pytest.raises(ValueError, match="power of two"):
            native.open(fd, 1000, 8, b"t")
        with pytest.raises(ValueError, match="root page"):
            native.finish(w, (1, 2))
    finally:
        os.close(fd)


def test_a_failed_page_write_raises_oserror(tmp_path):
    from energon_arrow.index import _sqlite_pages as native

    path = tmp_path / "ro"
    path.write_bytes(b"")
    fd = os.open(str(path), os.O_RDONLY)
    try:
        w = native.open(fd, 512, 8, b"i")
        with pytest.raises(OSError):
            native.add(w, 0, (("i", np.arange(1000, dtype=np.int64)),), 1, None)
    finally:
        os.close(fd)


def test_writer_errors_name_the_file(tmp_path, monkeypatch):
    import errno
    import types

    from energon_arrow.index import sqlite_pages

    def full_disk(*args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    path = str(tmp_path / "full.sqlite")
    writer = IndexPagesWriter(path)
    monkeypatch.setattr(sqlite_pages, "_native", types.SimpleNamespace(add=full_disk, finish=full_disk))
    rng = np.random.default_rng(2)
    with pytest.raises(OSError) as err:
        writer.try_add_shard(0, "a.tar", shard_index(["k"], [["jpg"]], rng))
    assert (err.value.errno, err.value.filename) == (errno.ENOSPC, path)
    with pytest.raises(OSError, match="full.sqlite"):
        writer.finish()


@pytest.mark.skipif(not page_writer_available(), reason="compiled page writer not built")
def test_finish_runs_quick_check_and_names_the_file(tmp_path, monkeypatch):
    import types

    from energon_arrow.index import sqlite_pages

    real = sqlite_pages._native

    def finish_then_damage(writer, roots):
        pages = real.finish(writer, roots)
        page_size = 4096
        with open(path, "r+b") as f:  # the samples table's root page: an invalid b-tree page type
            f.seek((roots[0] - 1) * page_size)
            f.write(b"\x07")
        return pages

    path = str(tmp_path / "damaged.sqlite")
    writer = IndexPagesWriter(path, page_size=4096)
    writer.try_add_shard(0, "a.tar", shard_index(["a", "b"], [["jpg"], ["txt"]], np.random.default_rng(3)))
    monkeypatch.setattr(sqlite_pages, "_native", types.SimpleNamespace(finish=finish_then_damage))
    with pytest.raises(sqlite_pages.PageWriterError, match=r"damaged\.sqlite.*quick_check"):
        writer.finish()
    ok = str(tmp_path / "ok.sqlite")
    monkeypatch.setattr(sqlite_pages, "_native", real)
    good = IndexPagesWriter(ok)
    good.try_add_shard(0, "a.tar", shard_index(["a"], [["jpg"]], np.random.default_rng(4)))
    good.finish()  # a sound file passes the check


@pytest.mark.parametrize("key_len", [0, 300])  # 300: overflow chains, whose next page is predicted
def test_pages_step_over_sqlite_lock_byte_page(tmp_path, key_len):
    """SQLite reserves the page holding byte 2**30 (its lock-byte page; an index.sqlite past 1 GiB reaches it). A
    writer started three pages before it (a sparse file: the pages before are left unused) writes across it
    without any tree referencing it: SQLite's check finds nothing but the unused pages."""
    from energon_arrow.index import sqlite_pages

    path = str(tmp_path / "big.sqlite")
    writer = IndexPagesWriter(path, page_size=512)
    lock = 2**30 // 512 + 1
    kinds = "".join(kind for _, kind in sqlite_pages._TREES).encode()
    writer._writer = sqlite_pages._native.open(writer._fd, 512, lock - 3, kinds)
    dataset = random_dataset(np.random.default_rng(5), 3, 40, key_len)
    for i, (shard, index) in enumerate(dataset):
        assert writer.try_add_shard(i, shard, index)
    pages = sqlite_pages._native.finish(writer._writer, writer._roots)
    os.pwrite(writer._fd, int(pages).to_bytes(4, "big"), 28)
    writer.abort()
    assert pages > lock
    with sqlite3.connect(path) as db:
        found = "\n".join(row[0] for row in db.execute("PRAGMA quick_check(30)"))  # the trees come first
        samples = db.execute("SELECT count(*) FROM samples INDEXED BY sqlite_autoindex_samples_1").fetchone()[
            0
        ]
    lines = [line for line in found.splitlines() if not line.startswith("***")]
    assert len(lines) == 30 and [line for line in lines if not line.endswith("is never used")] == []
    assert samples == sum(index.sample_count for _, index in dataset)
