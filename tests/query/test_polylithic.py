"""Polylithic datasets: references resolved against aux WebDatasets and plain folders, dangling ones reported."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from energon_arrow.adapters import NotFound, open_storage
from energon_arrow.query import DanglingReferenceError, open_dataset
from energon_arrow.query.join import JoinMember, join_datasets
from tests.query.conftest import make_energon_dataset


@pytest.fixture(scope="module")
def aux_wds(tmp_path_factory):
    """An energon-prepared aux WebDataset: 2 shards x 12 samples (keys 000000_*, 000001_*), 300-byte jpg parts."""
    return make_energon_dataset(
        str(tmp_path_factory.mktemp("aux") / "wds"), shards=2, samples=12, seed=5, image_bytes=300
    )


@pytest.fixture
def media_folder(tmp_path):
    root = tmp_path / "media"
    (root / "img").mkdir(parents=True)
    for i in range(5):
        (root / "img" / f"{i}.jpg").write_bytes(b"x" * (10 + i))
    return str(root)


def test_folder_references_with_dangling_report(energon_ds, media_folder):
    ds = open_dataset(energon_ds)
    res = ds.join_aux(
        {"media": media_folder},
        refs="SELECT sample_key, 'img/' || (sample_index % 8) || '.jpg' AS ref FROM samples WHERE shard_id = 0",
    )
    table = res.table
    assert table.num_rows == 12
    first = table.slice(0, 1).to_pylist()[0]
    assert first["file"] == "img/0.jpg" and first["byte_offset"] == 0 and first["byte_size"] == 10
    assert first["aux_url"] == media_folder and first["kind"] == "file" and first["found"]
    summary = res.summary()
    assert summary["media"]["references"] == 12 and summary["media"]["dangling"] == 3
    assert summary["media"]["examples"] == ["img/5.jpg", "img/6.jpg", "img/7.jpg"]
    assert res.dangling.num_rows == 3
    assert "9/12 references resolved, 3 dangling" in res.report()
    with pytest.raises(DanglingReferenceError, match="img/5.jpg"):
        res.raise_if_dangling()


def test_webdataset_aux_resolves_parts_and_samples(energon_ds, aux_wds):
    aux = aux_wds
    ds = open_dataset(energon_ds)
    refs = pa.table({"ref": ["000001_000004.jpg", "000000_000002", "000003_000000.jpg", "000001_000004.png"]})
    res = ds.join_aux(aux, refs=refs)
    rows = res.table.to_pylist()
    aux_ds = open_dataset(aux)
    part = aux_ds.sql(
        "SELECT shard_path, content_offset, content_size FROM sample_parts "
        "WHERE sample_key = '000001_000004' AND part_name = 'jpg'"
    ).rows()[0]
    assert (rows[0]["file"], rows[0]["byte_offset"], rows[0]["byte_size"], rows[0]["kind"]) == (*part, "part")
    assert rows[0]["byte_size"] == 300
    whole = aux_ds.sql(
        "SELECT byte_offset, byte_size FROM samples WHERE sample_key = '000000_000002'"
    ).rows()[0]
    assert (rows[1]["byte_offset"], rows[1]["byte_size"], rows[1]["kind"]) == (*whole, "sample")
    assert [r["found"] for r in rows] == [True, True, False, False]
    data = open_storage(aux).read_range(rows[0]["file"], rows[0]["byte_offset"], rows[0]["byte_size"])
    assert len(data) == 300


def test_routing_by_aux_column(energon_ds, media_folder, aux_wds):
    aux = aux_wds
    ds = open_dataset(energon_ds)
    refs = pa.table(
        {"aux": ["media", "wds", "wds", "nope"], "ref": ["img/1.jpg", "000000_000001.txt", "x.txt", "a"]}
    )
    res = ds.join_aux({"media": media_folder, "wds": aux}, refs=refs)
    assert res.table.column("found").to_pylist() == [True, True, False, False]
    assert res.summary()["nope"]["dangling"] == 1
    with pytest.raises(ValueError, match="need an 'aux' column"):
        ds.join_aux({"media": media_folder, "wds": aux}, refs=pa.table({"ref": ["a"]}))


def test_default_references_are_sample_keys(energon_ds, aux_wds):
    res = open_dataset(energon_ds).join_aux({"captions": aux_wds})
    assert res.summary()["captions"] == {
        "references": 48,
        "resolved": 24,
        "dangling": 24,
        "examples": ["000002_000000", "000002_000001", "000002_000002", "000002_000003", "000002_000004"],
    }


def test_join_members_validate(energon_ds):
    ds = open_dataset(energon_ds)
    with pytest.raises(ValueError, match="nonmatch must be one of"):
        join_datasets({"p": ds, "a": JoinMember(ds, "maybe")}, "train")
    with pytest.raises(ValueError, match="primary join dataset 'p' must keep nonmatch 'error'"):
        join_datasets({"p": JoinMember(ds, "skip"), "a": ds}, "train")
    joined = join_datasets({"p": ds, "same": ds}, "train")
    assert joined.num_rows == 36 and joined.column("same_byte_offset") == joined.column("p_byte_offset")


def test_missing_aux_source(energon_ds, tmp_path):
    with pytest.raises(NotFound, match="nowhere: folder not found"):
        open_dataset(energon_ds).join_aux(os.path.join(tmp_path, "nowhere"))
