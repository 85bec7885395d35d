"""energon_arrow.epathlib.EPath: energon's path object over energon-arrow storage (local, memory, S3)."""

from __future__ import annotations

import pytest

import energon_arrow as ea
from energon_arrow.adapters import NotFound, open_storage
from energon_arrow.epathlib import EPath


def test_names_and_joins(tmp_path):
    p = EPath(str(tmp_path)) / "a" / "b.tar"
    assert p.url == f"{tmp_path}/a/b.tar" and str(p) == p.url and p.is_local()
    assert (p.name, p.parent.name, p.with_suffix(".idx").name) == ("b.tar", "a", "b.idx")
    assert p.relative_to(EPath(tmp_path)) == "a/b.tar"
    assert EPath("s3://bucket/x/../y/z").url == "s3://bucket/y/z"
    assert EPath("msc://prof/data") / "ds" == EPath("msc://prof/data/ds")
    assert p / "/abs" == EPath("/abs") and p / EPath("s3://b/k") == EPath("s3://b/k")
    assert EPath("file:///tmp/x").url == "/tmp/x"
    assert sorted([EPath("/b"), EPath("/a")]) == [EPath("/a"), EPath("/b")]
    with pytest.raises(ValueError, match="different stores"):
        EPath("s3://b/k").relative_to(EPath("/b"))
    with pytest.raises(ValueError, match="not local"):
        EPath("s3://b/k").local_path()


def test_file_operations_on_every_backend(any_root):
    url, options = any_root
    root = EPath(url, options)
    root.mkdir()
    f = root / "sub" / "note.txt"
    f.write_text("hello")
    assert f.read_text() == "hello" and f.read_bytes() == b"hello" and f.size() == 5
    assert f.is_file() and not f.is_dir() and (root / "sub").is_dir()
    with f.open("rb") as fh:
        assert fh.read() == b"hello"
    with f.open("r", prefetch_file=True) as fh:
        assert fh.read() == "hello"
    with f.open("w") as fh:
        fh.write("rewritten")
    assert f.read_text() == "rewritten"
    with pytest.raises(RuntimeError), f.open("wb") as fh:
        fh.write(b"half")
        raise RuntimeError("fails while writing")
    assert f.read_text() == "rewritten"  # nothing published by the failed write
    (root / "sub" / "deep" / "x.bin").write_bytes(b"\0" * 3)
    assert sorted(p.relative_to(root) for p in root.walk()) == ["sub/deep/x.bin", "sub/note.txt"]
    assert [p.name for p in root.glob("**/*.bin")] == ["x.bin"]
    (root / "sub").copy(root / "copy")
    assert (root / "copy" / "deep" / "x.bin").read_bytes() == b"\0" * 3
    (root / "copy").move(root / "moved")
    assert (
        not (root / "copy" / "note.txt").is_file()
        and (root / "moved" / "note.txt").read_text() == "rewritten"
    )
    f.unlink()
    assert not f.is_file()
    with pytest.raises(NotFound):
        f.stat()


def test_loader_and_query_take_an_epath(tmp_path):
    from energon_arrow.index.prepare import PrepareOptions, prepare_dataset
    from energon_arrow.meta import field_map_dataset, parse_split_ratio
    from energon_arrow.query import open_dataset
    from energon_arrow.testing.synthetic import write_webdataset

    root = str(tmp_path / "ds")
    write_webdataset(root, shards=2, samples_per_shard=4, image_bytes=8)
    options = PrepareOptions(
        split_ratio=parse_split_ratio("1,0,0"),
        dataset_yaml=field_map_dataset("TextSample", {"text": "txt"}),
        num_workers=1,
    )
    prepare_dataset(EPath(root), options)
    with open_dataset(EPath(root)) as ds:
        assert ds.sql("SELECT count(*) AS n FROM samples").arrow().column("n").to_pylist() == [8]
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
    keys = []
    for path in (root, EPath(root)):
        ds = ea.get_val_dataset(path, batch_size=2, worker_config=wc, split_part="train")
        keys.append([k for batch in ea.get_loader(ds) for k in batch.__key__])
    assert keys[0] == keys[1] and len(keys[0]) == 8


def test_energons_default_profile_is_the_local_filesystem(tmp_path):
    """energon's epathlib.DEFAULT_PROFILE_NAME (multi-storage-client's reserved POSIX profile): msc://that/p is
    the local /p, as a path and as a storage."""
    from energon_arrow.energon.epathlib import DEFAULT_PROFILE_NAME

    (tmp_path / "f.txt").write_bytes(b"local")
    path = EPath(f"msc://{DEFAULT_PROFILE_NAME}{tmp_path}/f.txt")
    assert str(path) == f"{tmp_path}/f.txt" and path.is_local() and path.read_bytes() == b"local"
    assert str(path / ".." / "g.txt") == f"{tmp_path}/g.txt"
    assert open_storage(f"msc://{DEFAULT_PROFILE_NAME}{tmp_path}").read_bytes("f.txt") == b"local"


def test_stat_has_energons_names_too(tmp_path):
    """energon's EPath.stat() is multi-storage-client's ObjectMetadata: content_length, last_modified (UTC)."""
    (tmp_path / "f.bin").write_bytes(b"12345")
    info = EPath(str(tmp_path / "f.bin")).stat()
    assert info.content_length == info.size == 5
    assert info.last_modified.tzinfo is not None
    assert info.last_modified.timestamp() == pytest.approx((tmp_path / "f.bin").stat().st_mtime)


def test_glob_skips_hidden_names_as_energons_and_walk_does_not(tmp_path):
    """energon's EPath.glob: wildcards do not match names starting with "." (a pattern component that starts with
    "." does) and `**` does not enter hidden folders; walk() lists everything. Expected lists from energon 7.4.1."""
    for rel in ("a/x.tar", "a/.y.tar", "a/.h/z.tar", ".d/e/w.tar", "top.tar", ".top.tar"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"")
    root = EPath(str(tmp_path))

    def rel(paths):
        return sorted(str(p)[len(str(tmp_path)) + 1 :] for p in paths)

    assert rel(root.glob("**/*.tar")) == ["a/x.tar", "top.tar"]
    assert rel(root.glob("*.tar")) == ["top.tar"]
    assert rel(root.glob(".d/**/*.tar")) == [".d/e/w.tar"]
    assert rel(root.glob("a/.h/*.tar")) == ["a/.h/z.tar"]
    assert rel(root.glob("**/.y.tar")) == ["a/.y.tar"]
    assert rel(root.glob(".*.tar")) == [".top.tar"]
    assert rel(root.walk()) == [".d/e/w.tar", ".top.tar", "a/.h/z.tar", "a/.y.tar", "a/x.tar", "top.tar"]
