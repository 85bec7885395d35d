"""The dataset manifest over S3 (SeaweedFS behind the FaultProxy): prepare writes it; a GET of a file it lists
that comes back damaged (one byte flipped by the proxy's `corrupt_response`) is read again and the open succeeds;
damaged on every read it is a clear error; a damaged read while the loader builds its node-local row index leaves
no poisoned cache: the build and every later one return the right rows."""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from pathlib import Path

import numpy as np
import pytest

from energon_arrow.adapters import RetryPolicy, TransientError, open_storage
from energon_arrow.index.prepare import PrepareOptions, prepare_dataset
from energon_arrow.loader.row_index import default_cache_dir, open_row_index
from energon_arrow.meta import parse_split_ratio
from energon_arrow.meta.manifest import MANIFEST_REL, IntegrityError
from energon_arrow.meta.split import read_split
from energon_arrow.query import open_dataset
from energon_arrow.query.sideindex import load_side_index
from energon_arrow.testing.seaweedfs import ACCESS_KEY, SECRET_KEY
from energon_arrow.testing.synthetic import write_webdataset
from tests.manifest_entries import assert_entry_describes

pytestmark = pytest.mark.s3

FAST = RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.05)
QUERY = "SELECT shard_id, sample_index, sample_key, byte_offset, byte_size FROM samples ORDER BY 1, 2"


@pytest.fixture(scope="module")
def dataset(s3_server, tmp_path_factory):
    """A dataset prepared on S3 (4 shards of 5 samples): its URL."""
    local = str(tmp_path_factory.mktemp("src") / "ds")
    write_webdataset(local, shards=4, samples_per_shard=5, image_bytes=64)
    url = f"s3://{s3_server.create_bucket('ea-tests')}/manifest-{uuid.uuid4().hex[:8]}"
    storage = open_storage(url, s3_server.storage_options)
    for root, _, names in os.walk(local):
        for n in names:
            path = os.path.join(root, n)
            storage.write_atomic(os.path.relpath(path, local), Path(path).read_bytes())
    prepare_dataset(
        url, PrepareOptions(split_ratio=parse_split_ratio("3,1,0"), num_workers=2), s3_server.storage_options
    )
    return url


@pytest.fixture
def through(proxy, dataset):
    """A storage of the dataset whose requests go through the proxy (no faults queued)."""
    proxy.reset_counts()
    options = {"endpoint_url": proxy.endpoint_url, "key": ACCESS_KEY, "secret": SECRET_KEY}
    yield lambda: open_storage(dataset, options, retry=FAST)
    proxy.reset_counts()


def _gets(proxy, part: str) -> list[str]:
    return [outcome for method, path, _, outcome in proxy.requests if method == "GET" and part in path]


def test_manifest_written_on_s3_and_correct(dataset, s3_server):
    storage = open_storage(dataset, s3_server.storage_options)
    manifest = json.loads(storage.read_bytes(MANIFEST_REL))
    listed = {f.path for f in storage.scan("**/*") if not f.path.endswith((".tar", "manifest.json"))}
    assert set(manifest["files"]) == listed and len(listed) == 4 + 8  # .tar.idx, .nv-meta and side index
    for rel, entry in manifest["files"].items():
        data = storage.read_bytes(rel)
        assert_entry_describes(entry, data, rel)


@pytest.mark.parametrize(
    "rel",
    [
        ".nv-meta/.info.json",
        ".nv-meta/arrow/shards.parquet",
        ".nv-meta/arrow/samples.parquet",
        ".nv-meta/arrow/parts.parquet",
    ],
)
def test_a_damaged_get_is_read_again(proxy, through, dataset, s3_server, rel):
    with open_dataset(open_storage(dataset, s3_server.storage_options)) as ds:
        expected = ds.sql(QUERY).arrow()
    proxy.inject_for(rel.rsplit("/", 1)[1], "corrupt_response")
    with open_dataset(through()) as ds:
        assert ds.sql(QUERY).arrow().equals(expected)
    gets = _gets(proxy, rel.rsplit("/", 1)[1])  # (DuckDB reads shards.parquet in place too, later)
    assert gets[:2] == ["corrupt_response", "forwarded"] and gets.count("corrupt_response") == 1


PARTS_QUERY = (
    "SELECT shard_id, sample_index, part_name, content_offset, content_size FROM parts ORDER BY 1, 2, 3"
)


def test_a_damaged_range_of_a_duckdb_scan_is_read_again(proxy, through, dataset, s3_server):
    """parts.parquet is read in place by ranges (its footer at open, DuckDB's scans): each range is checked against
    the manifest's chunk CRCs, so damaged bytes are fetched again instead of answered (before: checked by size
    only). The damage is queued before the open: DuckDB keeps what it read of a small file (its external file
    cache, filled from verified reads), so a query after the first read may fetch nothing."""
    with open_dataset(open_storage(dataset, s3_server.storage_options)) as ds:
        expected = ds.sql(PARTS_QUERY).arrow()
    proxy.inject_for("parts.parquet", "corrupt_response", "corrupt_response")
    with open_dataset(through()) as ds:
        assert ds.sql(PARTS_QUERY).arrow().equals(expected)
    gets = _gets(proxy, "parts.parquet")
    assert gets.count("corrupt_response") == 2 and gets[-1] == "forwarded"


def test_a_range_damaged_every_time_is_a_clear_error(proxy, through, dataset):
    """Damaged on every read (queued before the open, as above): one IntegrityError naming the byte range."""
    proxy.inject_for("parts.parquet", *["corrupt_response"] * 50)
    with pytest.raises(IntegrityError) as err, open_dataset(through()) as ds:
        ds.sql(PARTS_QUERY).arrow()
    message = str(err.value)
    assert message.startswith(f"{dataset}/.nv-meta/arrow/parts.parquet: bytes [0, ")
    assert "do not match their CRC32C" in message and f"{FAST.attempts} reads" in message


def test_a_scan_whose_reads_keep_failing_names_the_url_and_attempts(proxy, through, dataset):
    """DuckDB reports a failed read of its filesystem as a Python traceback in its own message; the query raises
    the storage's error instead: the URL, the operation and the attempts made."""
    with open_dataset(through()) as ds:
        proxy.inject_for("parts.parquet", *["slowdown"] * 50)
        with pytest.raises(TransientError) as err:
            ds.sql(PARTS_QUERY).arrow()
    message = str(err.value)
    where = re.escape(f"{dataset}/.nv-meta/arrow/parts.parquet")
    assert re.match(rf"{where}: (GET|HEAD|LIST): transient storage error \(.*503", message), message
    assert message.endswith(f"gave up after {FAST.attempts} attempts") and "Traceback" not in message


def test_a_get_damaged_every_time_is_a_clear_error(proxy, through, dataset):
    proxy.inject_for(".info.json", *["corrupt_response"] * FAST.attempts)
    with pytest.raises(IntegrityError) as err:
        open_dataset(through())
    message = str(err.value)
    assert message.startswith(f"{dataset}/.nv-meta/.info.json: differs from what prepare recorded")
    assert f"{FAST.attempts} reads" in message and f"re-run `energon-arrow prepare {dataset}`" in message


def test_a_damaged_read_while_building_the_row_index_poisons_no_cache(proxy, through, dataset, s3_server):
    clean = open_storage(dataset, s3_server.storage_options)
    shards = load_side_index(clean).tables["shards"]
    shutil.rmtree(default_cache_dir(), ignore_errors=True)
    proxy.inject_for("samples.parquet", "corrupt_response")
    proxy.inject_for("parts.parquet", "corrupt_response")
    built = open_row_index(through(), shards, {})
    assert "corrupt_response" in _gets(proxy, "samples.parquet") + _gets(proxy, "parts.parquet")
    rows, keys = np.array(built.rows), built.keys().to_pylist()
    parts = {name: np.array(a) for name, a in built.parts.items()}
    with open_dataset(clean) as ds:
        truth = ds.sql(QUERY).arrow()
    assert keys == truth.column("sample_key").to_pylist()
    assert rows.tolist() == [
        [o, s] for o, s in zip(truth["byte_offset"].to_pylist(), truth["byte_size"].to_pylist())
    ]
    shutil.rmtree(default_cache_dir())  # a fault-free build gives the same arrays
    fresh = open_row_index(clean, shards, {})
    assert np.array_equal(fresh.rows, rows) and fresh.keys().to_pylist() == keys
    assert all(np.array_equal(fresh.parts[n], parts[n]) for n in parts)


def test_a_damaged_index_sqlite_download_is_done_again(proxy, through, dataset, s3_server, tmp_path):
    """index.sqlite streamed to a local file (the media metadata lookups) is checked against the manifest: a
    damaged download is done again; damaged every time, a clear error."""
    from energon_arrow.meta.manifest import download_verified

    rel = ".nv-meta/index.sqlite"
    clean = open_storage(dataset, s3_server.storage_options).read_bytes(rel)
    proxy.inject_for("index.sqlite", "corrupt_response")
    download_verified(through(), rel, str(tmp_path / "a.sqlite"))
    assert (tmp_path / "a.sqlite").read_bytes() == clean
    assert _gets(proxy, "index.sqlite") == ["corrupt_response", "forwarded"]
    proxy.inject_for("index.sqlite", *["corrupt_response"] * FAST.attempts)
    with pytest.raises(IntegrityError, match=rf"index.sqlite: differs .* {FAST.attempts} reads"):
        download_verified(through(), rel, str(tmp_path / "b.sqlite"))


SPLIT = ".nv-meta/split.yaml"


def test_split_yaml_damaged_the_same_way_twice_is_not_taken_for_an_edit(proxy, through, dataset, s3_server):
    """The proxy flips the same bits on every damaged GET, so two damaged reads agree; on a store whose ETags are
    MD5s a read is an edit only when its MD5 is the object's ETag, so both are read again."""
    clean = read_split(open_storage(dataset, s3_server.storage_options))
    proxy.inject_for("split.yaml", "corrupt_response", "corrupt_response")
    assert read_split(through()) == clean
    assert _gets(proxy, "split.yaml") == ["corrupt_response", "corrupt_response", "forwarded"]


def test_a_user_edit_of_split_yaml_on_s3_is_used_at_the_first_read(proxy, through, dataset, s3_server):
    storage = open_storage(dataset, s3_server.storage_options)
    original = storage.read_bytes(SPLIT)
    edited = b"split_parts:\n  train: []\n  val:\n    - shards/shard-{000000..000003}.tar\nexclude: []\n"
    storage.write_atomic(SPLIT, edited)
    try:
        with open_dataset(through()) as ds:
            count = (
                ds.sql("SELECT count(*) FROM split_samples WHERE split = 'val'").arrow().column(0)[0].as_py()
            )
        assert count == 20 and _gets(proxy, "split.yaml") == ["forwarded"]
    finally:
        storage.write_atomic(SPLIT, original)
