"""Media metadata in `prepare` and `prepare-media` (energon-arrow's side; equality with energon is in
tests/conformance/test_media_energon.py): the strategies' rules, usage errors, the rows of unchanged shards in
incremental prepares, clear errors with nothing published, and no media imports without the options."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from energon_arrow.index.media_extract import MediaFilterConfig
from energon_arrow.index.media_metadata import ImageMetadata, MediaMetadataType
from energon_arrow.testing.media import image_bytes, write_media_folder
from energon_arrow.testing.synthetic import tar_of_samples

PREP = ["--non-interactive", "--split-ratio", "1,0,0", "--no-progress", "--num-workers", "1"]


def _shard(root, i: int, samples: int = 3) -> None:
    data = [(f"k{i}_{j}", {"png": image_bytes("PNG", (i + 1, j + 1)), "txt": b"t"}) for j in range(samples)]
    with open(os.path.join(root, f"shard{i}.tar"), "wb") as f:
        f.write(tar_of_samples(data))


def _rows(root) -> dict[str, str]:
    with contextlib.closing(sqlite3.connect(os.path.join(root, ".nv-meta", "index.sqlite"))) as db:
        return dict(db.execute("SELECT entry_key, metadata_json FROM media_metadata").fetchall())


def _filters(root) -> list[tuple]:
    with contextlib.closing(sqlite3.connect(os.path.join(root, ".nv-meta", "index.sqlite"))) as db:
        return db.execute("SELECT strategy, patterns FROM media_filters ORDER BY filter_id").fetchall()


def _bomb_png() -> bytes:
    """A PNG declaring 20000 x 20000 pixels: Pillow refuses it as a decompression bomb when opening it."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", 20000, 20000, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", b"") + chunk(b"IEND", b"")


def test_filter_rules():
    pytest.importorskip("filetype")
    parse = MediaFilterConfig.parse
    for bad in [(None, False, False), ("*.jpg", True, False), (None, True, True), ("", False, False)]:
        with pytest.raises(ValueError, match="Exactly one of GLOB, HEADER, or EXTENSION"):
            parse(*bad)
    glob = parse("*.jpg,*/x_*", False, False)
    assert glob.patterns == ["*.jpg", "*/x_*"] and glob.stored_patterns == "*.jpg,*/x_*"
    accept = glob.name_filter()
    # energon's two checks: the lower-cased name, then the name as it is
    assert accept("a/b.jpg") and accept("A/B.jpg") and not accept("a.JPG") and accept("d/x_1.bin")
    ext = parse(None, False, True).name_filter()
    assert ext("k.seg.JPEG") and ext("k.flac") and not ext("k.txt") and not ext(".jpg") and not ext("k.jpg.")
    png = image_bytes("PNG", (3, 2))
    header = parse(None, True, False)
    assert header.extract_metadata(png, filename="k.bin") == ImageMetadata(
        width=3, height=2, format="PNG", mode="RGB"
    )
    assert (
        header.media_type("k.jpg", __import__("io").BytesIO(b"text")) is MediaMetadataType.IMAGE
    )  # by extension
    assert parse(None, False, True).extract_metadata(b"not an image", filename="k.jpg") is None
    assert (
        glob.extract_metadata(png, filename="k.jpg").format == "PNG"
    )  # energon 7.4.1 fails here (assertion)


def test_cli_usage_errors(tmp_path, cli):
    root = str(tmp_path / "ds")
    os.makedirs(root)
    _shard(root, 0)
    for extra, message in [
        (["--tar-index-only"], "cannot be combined with --tar-index-only"),
        (["--media-metadata-by-header"], "Exactly one of GLOB, HEADER, or EXTENSION"),
        (["--no-energon-index"], "cannot be combined with --no-energon-index"),
    ]:
        proc = cli("prepare", root, *PREP, "--media-metadata-by-extension", *extra)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    for path, message in [
        ("x.jsonl", "JSONL datasets do not support media metadata"),
        ("m.yaml", "Metadatasets"),
    ]:
        proc = cli("prepare", str(tmp_path / path), "--media-metadata-by-extension")
        assert proc.returncode == 1 and message in proc.stderr, proc.stderr
    proc = cli("prepare-media", root)
    assert proc.returncode == 2 and "Exactly one of" in proc.stderr
    proc = cli("prepare-media", str(tmp_path / "x.jsonl"), "--media-metadata-by-header")
    assert proc.returncode == 1 and "only supports WebDatasets or filesystem datasets" in proc.stderr


def test_incremental_prepare_keeps_the_rows_of_unchanged_shards(tmp_path, cli):
    root = str(tmp_path / "ds")
    os.makedirs(root)
    _shard(root, 0)
    _shard(root, 1)
    assert cli("prepare", root, *PREP, "--media-metadata-by-extension").returncode == 0
    first = _rows(root)
    assert len(first) == 6 and json_of(first["k1_2.png"]) == {
        "width": 2,
        "height": 3,
        "format": "PNG",
        "mode": "RGB",
    }
    # a new shard: the unchanged ones keep their rows (copied), the new one is read
    _shard(root, 2, samples=2)
    proc = cli("prepare", root, *PREP, "--media-metadata-by-extension")
    assert "1 indexed, 2 unchanged" in proc.stdout and "Media metadata: 8 files" in proc.stdout
    assert _rows(root) == {**first, "k2_0.png": _rows(root)["k2_0.png"], "k2_1.png": _rows(root)["k2_1.png"]}
    assert _filters(root) == [("EXTENSION", "")]
    manifest = json.loads(Path(root, ".nv-meta/arrow/manifest.json").read_bytes())  # with its media rows
    sqlite_bytes = Path(root, ".nv-meta/index.sqlite").read_bytes()
    assert manifest["files"][".nv-meta/index.sqlite"]["sha256"] == hashlib.sha256(sqlite_bytes).hexdigest()
    # without the option (energon keeps the tables too): the rows of the entries still there are kept, with a
    # warning for the re-indexed shard
    _shard(root, 1, samples=1)
    proc = cli("prepare", root, *PREP)
    assert proc.returncode == 0 and "kept the previous media metadata of 1 re-indexed shards" in proc.stderr
    assert set(_rows(root)) == {"k0_0.png", "k0_1.png", "k0_2.png", "k1_0.png", "k2_0.png", "k2_1.png"}
    # another filter: every shard is read again
    proc = cli("prepare", root, *PREP, "--media-metadata-by-glob", "k0_*")
    assert proc.returncode == 0 and set(_rows(root)) == {"k0_0.png", "k0_1.png", "k0_2.png"}
    assert _filters(root) == [("GLOB", "k0_*")]


def test_programmatic_prepare_with_a_media_filter(tmp_path):
    """energon's `BaseWebdatasetFactory.prepare_dataset(..., media_filter=...)` with our MediaFilterConfig or any
    object with energon's `strategy` and `patterns` (energon's own class)."""
    from types import SimpleNamespace

    import energon_arrow as ea
    from energon_arrow.meta.errors import MetaError

    root = str(tmp_path / "ds")
    os.makedirs(root)
    _shard(root, 0)
    _shard(root, 1)
    prepare = ea.BaseWebdatasetFactory.prepare_dataset
    found = prepare(
        root, ["shard0.tar", "shard1.tar"], media_filter=MediaFilterConfig.parse(None, False, True)
    )
    assert found == {"png", "txt"} and len(_rows(root)) == 6 and _filters(root) == [("EXTENSION", "")]
    theirs = SimpleNamespace(strategy=SimpleNamespace(value="GLOB"), patterns=["k1_*"])
    prepare(root, ["shard0.tar", "shard1.tar"], media_filter=theirs)
    assert set(_rows(root)) == {"k1_0.png", "k1_1.png", "k1_2.png"} and _filters(root) == [("GLOB", "k1_*")]
    with pytest.raises(MetaError, match="media_filter must be a MediaFilterConfig"):
        prepare(root, ["shard0.tar"], media_filter="by extension")
    with pytest.raises(MetaError, match="tar_index_only"):
        prepare(root, ["shard0.tar"], media_filter=theirs, tar_index_only=True)


def json_of(text: str) -> dict:
    import json

    return json.loads(text)


def test_bad_media_is_named_and_nothing_is_published(tmp_path, cli):
    root = str(tmp_path / "ds")
    os.makedirs(root)
    _shard(root, 0)
    assert cli("prepare", root, *PREP).returncode == 0
    before = sorted(os.listdir(os.path.join(root, ".nv-meta")))
    with open(os.path.join(root, "shard1.tar"), "wb") as f:
        f.write(tar_of_samples([("ok", {"png": image_bytes()}), ("bomb", {"png": _bomb_png()})]))
    proc = cli("prepare", root, *PREP, "--media-metadata-by-extension")
    assert proc.returncode == 1
    assert (
        "shard1.tar: member 'bomb.png' at byte 1536: cannot read the media metadata (DecompressionBombError"
        in (proc.stderr)
    )
    # the published files are the previous ones (the work folder keeps the indexed shards for the next run)
    assert sorted(set(os.listdir(os.path.join(root, ".nv-meta"))) - {".prepare-work"}) == before
    assert not _has_media(root)
    folder = str(tmp_path / "folder")
    os.makedirs(folder)
    with open(os.path.join(folder, "bomb.png"), "wb") as f:
        f.write(_bomb_png())
    proc = cli("prepare-media", folder, "--media-metadata-by-extension", "--no-progress")
    assert proc.returncode == 1 and "bomb.png: cannot read the media metadata" in proc.stderr
    assert os.listdir(folder) == ["bomb.png"]  # no .nv-meta left behind


def _has_media(root) -> bool:
    from energon_arrow.index.media_tables import has_media_tables

    return has_media_tables(os.path.join(root, ".nv-meta", "index.sqlite"))


def test_prepare_media_folder_by_header_and_again(tmp_path, cli):
    pytest.importorskip("av")  # the folder has a video
    pytest.importorskip("filetype")
    root = str(tmp_path / "fs")
    write_media_folder(root)
    proc = cli("prepare-media", root, "--media-metadata-by-header", "--no-progress")
    assert proc.returncode == 0 and "Stored metadata for 5 files" in proc.stdout
    assert set(_rows(root)) == {
        "a.jpg",
        "clip.mkv",
        "noext",
        "sub/b.PNG",
        "sub/c.gif",
    }  # noext: a PNG by header
    # a second run with another filter adds to the rows and filters (energon's prepare-media keeps them)
    tmp = str(tmp_path / "tmp")  # built there, copied beside the old file and renamed over it
    args = ["--media-metadata-by-glob", "*.gif", "--no-progress", "--num-workers", "2", "--tmp-path", tmp]
    proc = cli("prepare-media", root, *args)
    assert proc.returncode == 0 and "Stored metadata for 1 files" in proc.stdout
    assert len(_rows(root)) == 5 and _filters(root) == [("HEADER", ""), ("GLOB", "*.gif")]
    assert os.listdir(tmp) == [] and os.listdir(os.path.join(root, ".nv-meta")) == ["index.sqlite"]
    # energon: "Filesystem datasets must be prepared using 'energon prepare-media'"
    proc = cli("prepare", root, *PREP)
    assert proc.returncode == 1 and "a filesystem dataset" in proc.stderr and "prepare-media" in proc.stderr
    empty = str(tmp_path / "empty")
    os.makedirs(empty)
    proc = cli("prepare-media", empty, "--media-metadata-by-extension", "--no-progress")
    assert (
        proc.returncode == 1 and "No media files found to process" in proc.stderr and os.listdir(empty) == []
    )


def test_prepare_without_the_options_imports_no_media_reader(tmp_path):
    root = str(tmp_path / "ds")
    os.makedirs(root)
    _shard(root, 0)
    code = (
        "import sys; from energon_arrow.index.prepare import prepare_dataset, PrepareOptions; "
        f"prepare_dataset({root!r}, PrepareOptions(split_ratio=[('train', 1.0)], num_workers=1)); "
        "print(sorted(m for m in ('PIL', 'av', 'filetype', 'energon_arrow.index.media_extract') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=os.getcwd()
    )
    assert out.stdout.strip() == "[]"


@pytest.mark.s3
def test_media_metadata_on_s3(s3_root, cli):
    """prepare and prepare-media straight on S3 (ranged reads of the parts, threads), read back by the stores."""
    pytest.importorskip("av")
    from energon_arrow.adapters import open_storage
    from energon_arrow.loader.filestore import SystemFileStore
    from energon_arrow.media import AVMetadata
    from energon_arrow.testing.media import media_samples

    url, options = s3_root
    storage = open_storage(url, options)
    storage.write_atomic("ds/shard0.tar", tar_of_samples(media_samples(0)))
    storage.write_atomic("fs/img/a.png", image_bytes("PNG", (4, 2)))
    opts = ["--storage-options", __import__("json").dumps(options)]
    proc = cli("prepare", f"{url}/ds", *PREP[:-1], "2", "--media-metadata-by-extension", *opts)
    assert proc.returncode == 0 and "Media metadata: 8 files" in proc.stdout, proc.stderr
    # the index.sqlite of a prepared dataset is downloaded once (a SystemFileStore reads the same table; PartStore's
    # lookup is the same code, tested locally)
    md = SystemFileStore(f"{url}/ds", options).get_media_metadata("s0/a003.wav")
    assert md == AVMetadata(
        audio_duration=0.5, audio_channels=1, audio_sample_rate=8000, audio_num_samples=4000
    )
    proc = cli("prepare-media", f"{url}/fs", "--media-metadata-by-extension", "--no-progress", *opts)
    assert proc.returncode == 0 and "Stored metadata for 1 files" in proc.stdout, proc.stderr
    assert SystemFileStore(f"{url}/fs", options).get_media_metadata("img/a.png").width == 4


def test_prepare_filesystem_dataset_function(tmp_path, capsys, cli):
    """energon's `prepare_filesystem_dataset(EPath(folder), MediaFilterConfig, progress=)`: the rows prepare-media
    writes, read back through SystemFileStore; a prepared WebDataset or a file is refused."""
    from energon_arrow.epathlib import EPath
    from energon_arrow.index.media_extract import MediaFilterStrategy
    from energon_arrow.index.media_prepare import prepare_filesystem_dataset
    from energon_arrow.loader.filestore import SystemFileStore
    from energon_arrow.meta import MetaError

    root = tmp_path / "fs"
    os.makedirs(root / "sub")
    (root / "a.png").write_bytes(image_bytes("PNG", (5, 3)))
    (root / "sub" / "b.jpg").write_bytes(image_bytes("JPEG", (4, 4)))
    (root / "notes.txt").write_bytes(b"hello")
    by_extension = MediaFilterConfig(strategy=MediaFilterStrategy.EXTENSION)
    assert prepare_filesystem_dataset(EPath(root), by_extension, progress=True, workers=1) == 2
    assert "Processing media" in capsys.readouterr().err
    assert set(_rows(root)) == {"a.png", "sub/b.jpg"}
    meta = SystemFileStore(str(root)).get_media_metadata("a.png")
    assert isinstance(meta, ImageMetadata) and (meta.width, meta.height) == (5, 3)
    with pytest.raises(MetaError, match="expected the folder"):
        prepare_filesystem_dataset(EPath(root / "a.png"), by_extension, progress=False)
    wds = str(tmp_path / "wds")
    os.makedirs(wds)
    _shard(wds, 0)
    assert cli("prepare", wds, *PREP).returncode == 0
    with pytest.raises(MetaError, match="is a prepared WebDataset"):
        prepare_filesystem_dataset(wds, by_extension, progress=False)
