"""Media metadata against energon 7.4.1: the JSON form (each side reads the other's), `prepare
--media-metadata-by-extension` and `prepare-media` (WebDataset and plain folder) writing the same media tables,
and each side's FileStores reading the other's index (docs/migration.md, "Media metadata")."""

from __future__ import annotations

import contextlib
import shutil
import sqlite3

import pytest

pytestmark = pytest.mark.conformance
pytest.importorskip("av")
pytest.importorskip("filetype")
pytest.importorskip("megatron.energon")

from megatron.energon.cache.file_store import SystemFileStore as RefSystemFileStore  # noqa: E402
from megatron.energon.cache.file_store import WebdatasetFileStore  # noqa: E402
from megatron.energon.epathlib import EPath  # noqa: E402
from megatron.energon.media import metadata as ref  # noqa: E402

from energon_arrow import media  # noqa: E402
from energon_arrow.cli.main import main  # noqa: E402
from energon_arrow.loader.filestore import PartStore, SystemFileStore  # noqa: E402
from energon_arrow.testing.media import write_media_folder, write_media_webdataset  # noqa: E402
from tests.reference import energon_in_process  # noqa: E402


def _ours(*args: str) -> None:
    try:
        main([*args])
    except SystemExit as exc:
        assert not exc.code, f"energon-arrow {' '.join(args)} exited {exc.code}"


def _tables(root) -> tuple[list, list, list]:
    """(media rows, media filters, the tables' DDL) of root's index.sqlite."""
    with contextlib.closing(sqlite3.connect(str(root / ".nv-meta" / "index.sqlite"))) as db:
        return (
            db.execute("SELECT * FROM media_metadata ORDER BY entry_key").fetchall(),
            db.execute("SELECT filter_id, strategy, patterns FROM media_filters").fetchall(),
            db.execute(
                "SELECT name, sql FROM sqlite_master WHERE name LIKE '%media%' ORDER BY name"
            ).fetchall(),
        )


def test_json_form_round_trips_with_energon():
    cases = [
        (media.ImageMetadata(width=3, height=4, format="PNG", mode="LA"), ref.ImageMetadata),
        (media.AVMetadata(video_fps=29.97, video_num_frames=3, audio_sample_rate=16000), ref.AVMetadata),
        (media.AVMetadata(), ref.AVMetadata),
    ]
    for ours, ref_cls in cases:
        theirs = ref_cls(**ours.to_dict())
        kind, text = media.serialize_media_metadata(ours)
        ref_kind, ref_text = ref.serialize_media_metadata(theirs)
        assert (kind.value, text) == (ref_kind.value, ref_text)
        assert media.deserialize_media_metadata(ref_kind.value, ref_text) == ours
        assert ref.deserialize_media_metadata(kind.value, text) == theirs
    assert media.MediaMetadataType.from_string("image") is media.MediaMetadataType.IMAGE
    with pytest.raises(ValueError, match="Unsupported media metadata type: 'pdf'"):
        media.deserialize_media_metadata("pdf", "{}")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """The same multimedia WebDataset prepared with --media-metadata-by-extension by energon-arrow and energon."""
    base = tmp_path_factory.mktemp("media")
    write_media_webdataset(str(base / "ours"))
    shutil.copytree(base / "ours", base / "ref")
    common = ["--non-interactive", "--split-ratio", "1,0,0", "--no-progress", "--media-metadata-by-extension"]
    _ours("prepare", str(base / "ours"), *common, "--num-workers", "1")
    energon_in_process("prepare", str(base / "ref"), *common, "--num-workers", "1", "--skip-dataset-yaml")
    return base


def test_prepare_writes_energon_media_tables(prepared):
    ours, theirs = _tables(prepared / "ours"), _tables(prepared / "ref")
    assert ours == theirs
    rows = ours[0]
    assert len(rows) == 16 and ours[1] == [(1, "EXTENSION", "")]
    assert {k for k, _, _ in rows} >= {"s0/a002.JPG", "s0/a002.seg.webp", "s1/a003.mp4", "s1/a004.gif"}
    assert "s0/a004.bin" not in {k for k, _, _ in rows}  # a PNG, but not by its extension


def test_each_side_reads_the_others_media_metadata(prepared):
    theirs_on_ours = WebdatasetFileStore(EPath(str(prepared / "ours")))
    ours_on_theirs = PartStore(str(prepared / "ref"))
    for key, kind, text in _tables(prepared / "ours")[0]:
        expected = media.deserialize_media_metadata(kind, text)
        assert theirs_on_ours.get_media_metadata(key).to_dict() == expected.to_dict()
        assert ours_on_theirs.get_media_metadata(key) == expected
    md = ours_on_theirs.get_media_metadata("s0/a003.mp4")
    assert isinstance(md, media.AVMetadata) and md.video_num_frames == 6 and md.audio_sample_rate == 16000
    with pytest.raises(KeyError, match="media metadata missing for 's0/a000.txt'"):
        ours_on_theirs.get_media_metadata("s0/a000.txt")
    with pytest.raises(KeyError, match="no file named 'nope.jpg'"):
        ours_on_theirs.get_media_metadata("nope.jpg")


def test_prepare_media_on_an_energon_dataset_equals_energon_prepare(prepared, tmp_path):
    root = tmp_path / "plain"
    shutil.copytree(prepared / "ref", root, ignore=shutil.ignore_patterns(".nv-meta", "*.idx"))
    energon_in_process("prepare", str(root), "--non-interactive", "--split-ratio", "1,0,0", "--no-progress")
    _ours("prepare-media", str(root), "--media-metadata-by-extension", "--no-progress", "--num-workers", "1")
    assert _tables(root)[0] == _tables(prepared / "ref")[0]
    with contextlib.closing(sqlite3.connect(str(root / ".nv-meta" / "index.sqlite"))) as db:
        assert db.execute("SELECT count(*) FROM samples").fetchone() == (10,)  # the sample tables are kept


def test_prepare_media_folder_equals_energon(tmp_path):
    write_media_folder(str(tmp_path / "ours"))
    shutil.copytree(tmp_path / "ours", tmp_path / "ref")
    args = ["--media-metadata-by-extension", "--no-progress", "--num-workers", "1"]
    _ours("prepare-media", str(tmp_path / "ours"), *args)
    energon_in_process("prepare-media", str(tmp_path / "ref"), *args)
    ours, theirs = _tables(tmp_path / "ours"), _tables(tmp_path / "ref")
    assert ours == theirs and [k for k, _, _ in ours[0]] == ["a.jpg", "clip.mkv", "sub/b.PNG", "sub/c.gif"]
    expected = media.ImageMetadata(width=3, height=4, format="PNG", mode="LA")
    assert (
        RefSystemFileStore(str(tmp_path / "ours")).get_media_metadata("sub/b.PNG").to_dict()
        == expected.to_dict()
    )
    assert SystemFileStore(str(tmp_path / "ref")).get_media_metadata("sub/b.PNG") == expected
