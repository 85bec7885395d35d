"""Copied and uploaded datasets load (new mtimes / ETags, same content); a same-size content change is still caught."""

from __future__ import annotations

import logging
import os
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

import energon_arrow as ea
from energon_arrow.index.fingerprint import (
    FINGERPRINT_WINDOW,
    FINGERPRINT_WINDOWS,
    fingerprint_ranges,
    read_fingerprints,
)
from energon_arrow.index.prepare import PrepareOptions, prepare_dataset
from energon_arrow.loader.reader import SampleReader
from energon_arrow.loader.source import open_split
from energon_arrow.meta import field_map_dataset, parse_split_ratio
from energon_arrow.query import StaleIndexError, open_dataset
from energon_arrow.testing.synthetic import write_webdataset
from tests.query.test_s3 import upload

SHARD = "shards/shard-000001.tar"


def _prepare(root: str) -> None:
    options = PrepareOptions(
        split_ratio=parse_split_ratio("3,1,0"),
        dataset_yaml=field_map_dataset("CaptioningSample", {"image": "jpg", "caption": "txt"}),
        num_workers=1,
    )
    prepare_dataset(root, options)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> str:
    """4 shards x 20 samples (jpg/txt/json) prepared by energon-arrow; copy it before changing anything."""
    root = str(tmp_path_factory.mktemp("copied") / "ds")
    write_webdataset(root, shards=4, samples_per_shard=20, image_bytes=4000)
    _prepare(root)
    return root


def cp_r(src: str, dst: str) -> str:
    """`cp -r`: contents only, every file gets a new mtime (pushed an hour ahead so it surely differs)."""
    shutil.copytree(src, dst, copy_function=shutil.copyfile)
    for dirpath, _, files in os.walk(dst):
        for name in files:
            path = os.path.join(dirpath, name)
            st = os.stat(path)
            os.utime(path, (st.st_atime + 3600, st.st_mtime + 3600))
    return dst


def val_keys(module, root: str, **kw) -> list[str]:
    """The keys of the val split's batches, loaded by `module` (energon_arrow or megatron.energon) undecoded."""

    class RawParts(module.DefaultTaskEncoder):
        decoder = None  # the synthetic "images" are not real JPEGs

    wc = module.WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = module.get_val_dataset(root, worker_config=wc, batch_size=5, task_encoder=RawParts(), **kw)
    return [k for batch in module.get_loader(ds) for k in batch.__key__]


def overwrite_same_size(path: str) -> None:
    """Change bytes inside a member's payload (headers and size unchanged) and give the file a new mtime."""
    with open(path, "r+b") as f:
        f.seek(512 + 8)
        old = f.read(4)
        f.seek(512 + 8)
        f.write(bytes(b ^ 0xFF for b in old))
    st = os.stat(path)
    os.utime(path, (st.st_atime, st.st_mtime + 7200))


def test_fingerprint_windows_are_bounded():
    assert fingerprint_ranges(10_000, 9_000) == [(0, 9_000)]  # small shards: the whole data
    ranges = fingerprint_ranges(10 << 30, (10 << 30) - 1024)
    assert len(ranges) == FINGERPRINT_WINDOWS and all(n == FINGERPRINT_WINDOW for _, n in ranges)
    assert ranges[0][0] == 0 and ranges[-1][0] + FINGERPRINT_WINDOW == (10 << 30) - 1024
    assert all(a[0] < b[0] for a, b in zip(ranges, ranges[1:]))


def test_prepare_records_fingerprints(prepared):
    shards = pq.read_table(f"{prepared}/.nv-meta/arrow/shards.parquet")
    assert shards.column("fingerprint").null_count == 0
    assert len(set(shards.column("fingerprint").to_pylist())) == 4


def test_copied_dataset_loads(prepared, tmp_path, caplog):
    copy = cp_r(prepared, str(tmp_path / "copy"))
    assert os.stat(f"{copy}/{SHARD}").st_mtime != os.stat(f"{prepared}/{SHARD}").st_mtime
    with caplog.at_level(logging.INFO, logger="energon_arrow.query.sideindex"):
        ds = open_dataset(copy)
    assert ds.sql("SELECT count(*) FROM samples").scalar() == 80
    assert "4 shard(s) have new modification times or ETags but unchanged content" in caplog.text
    assert len(open_split(copy, "train")) == 60
    assert val_keys(ea, copy) == val_keys(ea, prepared)


@pytest.mark.conformance
def test_energon_loads_the_copy_too(prepared, tmp_path):
    energon = pytest.importorskip("megatron.energon")
    copy = cp_r(prepared, str(tmp_path / "copy"))
    keys = val_keys(ea, copy)
    assert len(keys) == 20 and sorted(val_keys(energon, copy)) == sorted(keys)


def test_same_size_content_change_is_detected(prepared, tmp_path):
    copy = cp_r(prepared, str(tmp_path / "copy"))
    overwrite_same_size(f"{copy}/{SHARD}")
    message = rf"{SHARD}: shard changed since it was indexed \(same size, different content fingerprint\)"
    with pytest.raises(StaleIndexError, match=message):
        open_dataset(copy)
    # the loader lists the folders at open and checks each shard when it first reads it (loader/shard_check.py)
    hits = 0
    for split in ("train", "val"):
        src = open_split(copy, split)
        shard_of_row = np.asarray(src.shard_id)
        changed = shard_of_row == src.shard_paths.index(SHARD)
        reader = SampleReader(src)
        assert len(reader.read(np.flatnonzero(~changed)[:3])) == 3  # copied shards: fingerprints match
        if changed.any():
            hits += 1
            with pytest.raises(StaleIndexError, match=message):
                reader.read(np.flatnonzero(changed)[:1])
    assert hits == 1
    assert open_dataset(copy, verify=False).sql("SELECT count(*) FROM samples").scalar() == 80
    assert len(open_split(copy, "train", verify=False)) == 60


def test_size_change_is_detected_without_reading(prepared, tmp_path):
    copy = cp_r(prepared, str(tmp_path / "copy"))
    with open(f"{copy}/{SHARD}", "ab") as f:
        f.write(b"\0" * 512)
    with pytest.raises(StaleIndexError, match=rf"{SHARD}: shard changed since it was indexed \(size "):
        open_dataset(copy)


def test_prepare_of_a_copy_reuses_unchanged_shards(prepared, tmp_path):
    copy = cp_r(prepared, str(tmp_path / "copy"))
    overwrite_same_size(f"{copy}/{SHARD}")
    result = prepare_dataset(copy, PrepareOptions(split_ratio=parse_split_ratio("3,1,0"), num_workers=1))
    assert (result.reused, result.indexed) == (3, 1)  # the changed shard is read again, the copies are not
    shards = pq.read_table(f"{copy}/.nv-meta/arrow/shards.parquet").to_pydict()
    i = shards["path"].index(SHARD)
    assert shards["mtime"][i] == os.stat(f"{copy}/{SHARD}").st_mtime
    assert (
        shards["fingerprint"]
        != pq.read_table(f"{prepared}/.nv-meta/arrow/shards.parquet")["fingerprint"].to_pylist()
    )
    assert open_dataset(copy).sql("SELECT count(*) FROM samples").scalar() == 80


def _drop_fingerprints(root: str) -> None:
    """What a side index written before fingerprints existed looks like."""
    path = f"{root}/.nv-meta/arrow/shards.parquet"
    table = pq.read_table(path)
    pq.write_table(table.drop_columns(["fingerprint"]), path)
    os.remove(f"{root}/.nv-meta/arrow/manifest.json")  # nor a manifest (written since)


def test_index_without_fingerprints_still_opens(prepared, tmp_path, caplog):
    copy = cp_r(prepared, str(tmp_path / "copy"))
    _drop_fingerprints(copy)
    with caplog.at_level(logging.WARNING, logger="energon_arrow.query.sideindex"):
        ds = open_dataset(copy)
    assert ds.sql("SELECT count(*) FROM samples").scalar() == 80
    assert "4 shard(s) have new modification times but their old size" in caplog.text
    with open(f"{copy}/{SHARD}", "ab") as f:
        f.write(b"\0" * 512)
    with pytest.raises(StaleIndexError, match=rf"{SHARD}: shard changed since it was indexed \(size "):
        open_dataset(copy)


def test_prepare_over_an_old_index_reuses_rows_and_adds_fingerprints(prepared, tmp_path):
    copy = str(tmp_path / "copy")
    shutil.copytree(prepared, copy)  # mtimes kept: every shard is reused
    _drop_fingerprints(copy)
    options = PrepareOptions(split_ratio=parse_split_ratio("3,1,0"), num_workers=1)
    result = prepare_dataset(copy, options)
    assert (result.reused, result.indexed) == (4, 0)
    ours = pq.read_table(f"{copy}/.nv-meta/arrow/shards.parquet").column("fingerprint")
    assert ours == pq.read_table(f"{prepared}/.nv-meta/arrow/shards.parquet").column("fingerprint")


@pytest.mark.s3
def test_prepare_on_s3_fingerprints_whole_reads_as_ranged_reads_do(prepared, s3_root):
    """Small remote shards are read whole by prepare and fingerprinted from those bytes: the values must equal
    the local prepare's and `read_fingerprints`' ranged reads of the objects."""
    url, options = s3_root
    upload(prepared, url, options)
    store = open_dataset(url, options).storage
    result = prepare_dataset(url, PrepareOptions(split_ratio=parse_split_ratio("3,1,0"), force=True), options)
    assert result.indexed == 4
    with open_dataset(url, options) as ds:
        shards = ds.sql("SELECT path, size, data_end, fingerprint FROM shards ORDER BY shard_id").arrow()
    local = pq.read_table(f"{prepared}/.nv-meta/arrow/shards.parquet")["fingerprint"].to_pylist()
    assert shards["fingerprint"].to_pylist() == local
    ranged = read_fingerprints(
        store, list(zip(*(shards[c].to_pylist() for c in ("path", "size", "data_end"))))
    )
    assert ranged == local


@pytest.mark.s3
def test_uploaded_dataset_loads_and_changes_are_detected(prepared, s3_root):
    url, options = s3_root
    upload(prepared, url, options)  # new LastModified, ETags that the local index never had
    ds = open_dataset(url, options)
    assert ds.sql("SELECT count(*) FROM samples").scalar() == 80
    assert len(open_split(url, "train", options)) == 60
    assert val_keys(ea, url, storage_options=options) == val_keys(ea, prepared)
    store = ds.storage
    data = bytearray(store.read_bytes(SHARD))
    data[600] ^= 0xFF
    store.write_atomic(SHARD, bytes(data))
    with pytest.raises(StaleIndexError, match=r"different content fingerprint"):
        open_dataset(url, options)
    assert open_dataset(url, options, verify=False).sql("SELECT count(*) FROM shards").scalar() == 4


@pytest.mark.s3
@pytest.mark.conformance
def test_energon_loads_the_upload_too(prepared, s3_root, s3_server, tmp_path, monkeypatch):
    """energon reads S3 through multi-storage-client: an `msc://profile/prefix` path and a profile config."""
    energon = pytest.importorskip("megatron.energon")
    from energon_arrow.testing.seaweedfs import ACCESS_KEY, SECRET_KEY

    url, options = s3_root
    upload(prepared, url, options)
    bucket, prefix = url.removeprefix("s3://").split("/", 1)
    profile = f"ea{prefix}"
    config = tmp_path / "msc.yaml"
    config.write_text(
        f"profiles:\n  {profile}:\n"
        f"    storage_provider:\n      type: s3\n      options:\n        base_path: {bucket}\n"
        f"        endpoint_url: {s3_server.endpoint_url}\n        region_name: us-east-1\n"
        f"    credentials_provider:\n      type: S3Credentials\n"
        f"      options:\n        access_key: {ACCESS_KEY}\n        secret_key: {SECRET_KEY}\n"
    )
    monkeypatch.setenv("MSC_CONFIG", str(config))
    keys = val_keys(ea, url, storage_options=options)
    assert len(keys) == 20 and sorted(val_keys(energon, f"msc://{profile}/{prefix}")) == sorted(keys)
