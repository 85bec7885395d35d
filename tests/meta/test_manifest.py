"""`.nv-meta/arrow/manifest.json` (meta.manifest), local datasets: prepare records every file it publishes; readers
check what they read against it (a flipped byte is a clear error naming the file), a user's edit of split.yaml is
used, datasets without a manifest open as before; the loader's row index is keyed by the manifest's digests and a
damaged one is rebuilt, not used."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from energon_arrow.adapters import open_storage
from energon_arrow.index.prepare import PrepareOptions, prepare_dataset
from energon_arrow.loader.row_index import LOCAL_REL, open_row_index
from energon_arrow.meta import parse_split_ratio, read_tar_index
from energon_arrow.meta.manifest import MANIFEST_REL, IntegrityError
from energon_arrow.query import open_dataset
from energon_arrow.query.sideindex import load_side_index
from energon_arrow.testing.synthetic import write_webdataset
from tests.manifest_entries import assert_entry_describes

RATIO = parse_split_ratio("3,1,0")
COUNT = "SELECT count(*) AS n FROM samples"


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("manifest") / "ds")
    write_webdataset(root, shards=4, samples_per_shard=5, image_bytes=64)
    prepare_dataset(root, PrepareOptions(split_ratio=RATIO, num_workers=1))
    return root


@pytest.fixture
def prepared(template, tmp_path):
    root = str(tmp_path / "ds")
    shutil.copytree(template, root)
    return root


def _flip(path: str, at: int | None = None) -> None:
    data = bytearray(Path(path).read_bytes())
    at = len(data) // 2 if at is None else at
    data[at] ^= 0x01
    with open(path, "wb") as f:
        f.write(data)


def _scalar(ds, query: str):
    return ds.sql(query).arrow().column(0)[0].as_py()


def test_manifest_lists_every_published_file_with_its_digest(prepared):
    manifest = json.loads(Path(prepared, MANIFEST_REL).read_bytes())
    published = {
        os.path.relpath(os.path.join(d, n), prepared)
        for d, _, names in os.walk(prepared)
        for n in names
        if not n.endswith(".tar") and "/loader" not in d and not n.endswith((".lock", "manifest.json"))
    }
    assert set(manifest["files"]) == published
    assert {".nv-meta/index.sqlite", ".nv-meta/index.uuid", ".nv-meta/arrow/summary.parquet"} <= published
    assert sum(rel.endswith(".tar.idx") for rel in published) == 4
    for rel, entry in manifest["files"].items():
        data = Path(prepared, rel).read_bytes()
        assert_entry_describes(entry, data, rel)
    assert manifest["editable"] == [".nv-meta/split.yaml"]


@pytest.mark.parametrize(
    "rel", [".nv-meta/.info.json", ".nv-meta/index.uuid", ".nv-meta/arrow/shards.parquet",
            ".nv-meta/arrow/summary.parquet"],
)  # fmt: skip
def test_a_flipped_byte_is_a_clear_error(prepared, rel):
    _flip(os.path.join(prepared, rel))
    with pytest.raises(IntegrityError) as err:
        open_dataset(prepared)
    message = str(err.value)
    assert message.startswith(os.path.join(prepared, rel) + ": differs from what prepare recorded")
    assert (
        "expected" in message
        and "read" in message
        and f"re-run `energon-arrow prepare {prepared}`" in message
    )


def test_a_resized_rows_file_is_an_error_and_a_flipped_one_is_caught_by_the_row_index_build(prepared):
    samples = os.path.join(prepared, ".nv-meta/arrow/samples.parquet")
    with open(samples, "ab") as f:  # DuckDB scans it in place: its size is checked
        f.write(b"\0")
    with pytest.raises(IntegrityError, match="samples.parquet: is .* bytes, prepare recorded"):
        open_dataset(prepared)
    with open(samples, "r+b") as f:
        f.truncate(os.path.getsize(samples) - 1)
    _flip(samples, 4)  # same size: the loader, which reads it whole, checks its digest before building on it
    shutil.rmtree(os.path.join(prepared, LOCAL_REL))
    storage = open_storage(prepared)
    shards = load_side_index(storage).tables["shards"]
    with pytest.raises(IntegrityError, match="samples.parquet: differs from what prepare recorded"):
        open_row_index(storage, shards, {})
    assert not os.path.exists(os.path.join(prepared, LOCAL_REL))  # nothing built on the damaged file


def test_a_flipped_tar_index_is_an_error(prepared):
    shard = "shards/shard-000001.tar"
    _flip(os.path.join(prepared, shard + ".idx"), 3)
    with pytest.raises(
        IntegrityError, match=r"shard-000001.tar.idx: differs .* re-run `energon-arrow prepare"
    ):
        read_tar_index(open_storage(prepared), shard)


def test_a_user_edit_of_split_yaml_is_used(prepared):
    path = os.path.join(prepared, ".nv-meta/split.yaml")
    with open(path, "w") as f:  # every shard in val now
        f.write("split_parts:\n  train: []\n  val:\n    - shards/shard-{000000..000003}.tar\nexclude: []\n")
    with open_dataset(prepared) as ds:
        assert _scalar(ds, "SELECT count(*) FROM split_samples WHERE split = 'val'") == 20


def test_a_dataset_without_manifest_opens_as_before(prepared):
    with open_dataset(prepared) as ds:
        before = ds.sql("SELECT * FROM samples ORDER BY shard_id, sample_index").arrow()
    os.remove(os.path.join(prepared, MANIFEST_REL))
    _flip(os.path.join(prepared, ".nv-meta/index.uuid"), 0)  # nothing to check it against: read as it is
    with open_dataset(prepared) as ds:
        assert ds.sql("SELECT * FROM samples ORDER BY shard_id, sample_index").arrow().equals(before)


def test_a_damaged_row_index_is_rebuilt_not_used(prepared):
    storage = open_storage(prepared)
    shards = load_side_index(storage).tables["shards"]
    index = open_row_index(storage, shards, {})
    assert index.folder == storage.local_path(LOCAL_REL)  # prepare wrote it
    rows, keys = np.array(index.rows), index.keys().to_pylist()
    manifest = json.loads(Path(index.folder, "manifest.json").read_bytes())
    assert all(s.startswith(".nv-meta/arrow/") and "=sha256:" in s for s in manifest["source"][:3])
    with open(os.path.join(index.folder, "rows.npy"), "r+b") as f:  # cut short
        f.truncate(os.path.getsize(f.name) - 16)
    again = open_row_index(open_storage(prepared), shards, {})
    assert np.array_equal(again.rows, rows) and again.keys().to_pylist() == keys
    with open(os.path.join(index.folder, "manifest.json"), "w") as f:  # unreadable
        f.write("{")
    again = open_row_index(open_storage(prepared), shards, {})
    assert np.array_equal(again.rows, rows) and again.keys().to_pylist() == keys


def test_tar_index_only_records_what_it_rewrites(prepared, tmp_path):
    """`prepare --tar-index-only` after a shard changed: the rewritten `.tar.idx` is recorded in the manifest
    (readers accept it), the others keep their entries, and the changed sample count is a warning."""
    other = str(tmp_path / "other")
    write_webdataset(other, shards=2, samples_per_shard=7, image_bytes=64)
    shard = "shards/shard-000001.tar"
    shutil.copyfile(os.path.join(other, shard), os.path.join(prepared, shard))
    storage = open_storage(prepared)
    before = json.loads(Path(prepared, MANIFEST_REL).read_text())["files"]
    result = prepare_dataset(prepared, PrepareOptions(tar_index_only=True, num_workers=1))
    assert any("shard-000001.tar: 7 samples now, 5 in" in w for w in result.warnings)
    after = json.loads(Path(prepared, MANIFEST_REL).read_text())["files"]
    rewritten = shard + ".idx"
    assert after[rewritten] != before[rewritten]
    assert {k: v for k, v in after.items() if k != rewritten} == {
        k: v for k, v in before.items() if k != rewritten
    }
    assert len(read_tar_index(open_storage(prepared), shard)) == 7 + 1  # each sample's offset and the end
    assert len(read_tar_index(storage, "shards/shard-000000.tar")) == 5 + 1


def test_chunk_crcs_of_a_file_round_trip_through_the_manifest(tmp_path):
    from crc32c import crc32c

    from energon_arrow.meta.manifest import RANGE_CHUNK, digest_of_file, manifest_bytes, parse_manifest

    data = np.random.default_rng(5).integers(0, 256, 9 * RANGE_CHUNK + 77, dtype=np.uint8).tobytes()
    path = tmp_path / "f.parquet"
    path.write_bytes(data)
    digest = digest_of_file(str(path), chunk_crcs=True)
    want = [crc32c(data[i : i + RANGE_CHUNK]) for i in range(0, len(data), RANGE_CHUNK)]
    assert digest.chunks.crcs.tolist() == want and digest.size == len(data)
    parsed = parse_manifest(manifest_bytes({"a/f.parquet": digest, "b": digest_of_file(str(path))}))
    assert parsed.entry("a/f.parquet").chunks.crcs.tolist() == want and parsed.entry("b").chunks is None
    raw = json.loads(manifest_bytes({"a/f.parquet": digest}))
    raw["files"]["a/f.parquet"]["size"] += RANGE_CHUNK  # CRCs that do not cover the file: not a manifest
    body = {k: v for k, v in raw.items() if k != "self_sha256"}
    from energon_arrow.meta.manifest import _body_digest

    raw["self_sha256"] = _body_digest(body)
    assert parse_manifest(json.dumps(raw).encode()) is None
