"""The query layer on a real S3 server (SeaweedFS) and memory://: conversion, Parquet read in place, staleness."""

from __future__ import annotations

import io
import json
import os

import pyarrow.parquet as pq
import pytest

from energon_arrow.adapters import open_storage
from energon_arrow.cli.main import main
from energon_arrow.query import StaleIndexError, open_dataset


def upload(local_root: str, url: str, options: dict) -> None:
    store = open_storage(url, options)
    for dirpath, _, files in os.walk(local_root):
        for name in files:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, local_root)
            with open(path, "rb") as f:
                store.write_atomic(rel, f.read())


@pytest.mark.s3
def test_s3_dataset_end_to_end(energon_ds, s3_root, tmp_path):
    url, options = s3_root
    upload(energon_ds, url, options)
    assert open_dataset(url, options).index_source == "index.sqlite (converted, in memory)"  # read-only
    ds = open_dataset(url, options, publish=True)
    assert ds.index_source == "index.sqlite (converted, published)"
    assert ds.sql("SELECT count(*) FROM samples").scalar() == 48
    again = open_dataset(url, options)
    assert again.index_source == "parquet"
    assert again.sql("SELECT sum(sample_count)::BIGINT FROM shards").scalar() == 48
    assert again.split("train").num_rows == 36
    assert again.samples.collect().height == 48
    parts = again.read_parts("txt", where="sample_key = '000001_000002'")
    assert parts.column("content")[0].as_py().startswith(b"sample 2 of shard 1")
    res = again.join_aux({"self": url}, storage_options=options)
    assert res.summary()["self"]["dangling"] == 0
    store = open_storage(url, options)
    store.write_atomic("shards/shard-000003.tar", store.read_bytes("shards/shard-000003.tar") + b"\0" * 512)
    with pytest.raises(StaleIndexError, match=r"shard-000003\.tar: shard changed since it was indexed"):
        open_dataset(url, options)


def test_memory_dataset(energon_ds, memory_root):
    url, options = memory_root
    upload(energon_ds, url, options)
    assert open_dataset(url, publish=True).index_source == "index.sqlite (converted, published)"
    ds = open_dataset(url)
    assert ds.index_source == "parquet" and ds.split("val").num_rows == 12
    assert ds.sql("SELECT count(*) FROM parts").scalar() == 144
    assert ds.parts.collect().height == 144


@pytest.mark.s3
def test_cli_query_and_info_on_s3(energon_ds, s3_root, capsysbinary):
    url, options = s3_root
    upload(energon_ds, url, options)
    opts = ["--storage-options", json.dumps(options)]

    def cli(*args):
        try:
            main([*args, *opts])
        except SystemExit as exc:
            assert not exc.code
        return capsysbinary.readouterr()

    cli(
        "query",
        url,
        "SELECT * FROM split_samples WHERE split = 'val'",
        "--format",
        "parquet",
        "-o",
        f"{url}/out/val.parquet",
    )
    data = open_storage(url, options).read_bytes("out/val.parquet")
    assert pq.read_table(io.BytesIO(data)).num_rows == 12
    info = json.loads(cli("info", url, "--json").out)
    assert info["samples"] == 48 and info["path"] == url
