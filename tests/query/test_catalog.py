"""open_dataset over an energon-prepared dataset: side index from index.sqlite, SQL, frames, read-only catalog."""

from __future__ import annotations

import os
import sqlite3

import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

import energon_arrow
from energon_arrow.index.schema import SIDE_INDEX_FILES
from energon_arrow.query import NotPreparedError, QueryError, ReadOnlyError, StaleIndexError, open_dataset


def sqlite_rows(root, sql):
    con = sqlite3.connect(f"file:{root}/.nv-meta/index.sqlite?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_side_index_equals_energon_sqlite_and_is_published(energon_ds):
    ds = open_dataset(energon_ds, publish=True)
    assert ds.index_source == "index.sqlite (converted, published)"
    for name in SIDE_INDEX_FILES:
        assert os.path.isfile(f"{energon_ds}/.nv-meta/arrow/{name}.parquet")
    ours = ds.sql("SELECT shard_id, sample_key, sample_index, byte_offset, byte_size FROM samples").rows()
    theirs = sqlite_rows(
        energon_ds, "SELECT tar_file_id, sample_key, sample_index, byte_offset, byte_size FROM samples"
    )
    assert sorted(ours) == sorted(theirs) and len(ours) == 48
    ours = ds.sql("SELECT shard_id, sample_index, part_name, content_offset, content_size FROM parts").rows()
    theirs = sqlite_rows(
        energon_ds,
        "SELECT tar_file_id, sample_index, part_name, content_byte_offset, content_byte_size FROM sample_parts",
    )
    assert sorted(ours) == sorted(theirs) and len(ours) == 144
    shards = ds.sql("SELECT path, sample_count, size, data_end FROM shards ORDER BY shard_id").rows()
    assert [s[0] for s in shards] == [f"shards/shard-{i:06d}.tar" for i in range(4)]
    for path, count, size, end in shards:
        assert count == 12 and size == os.path.getsize(f"{energon_ds}/{path}") and 0 < end <= size
    assert open_dataset(energon_ds).index_source == "parquet"


def test_conversion_can_stay_in_memory(energon_ds):
    ds = open_dataset(energon_ds, publish=False)
    assert ds.index_source == "index.sqlite (converted, in memory)"
    assert not os.path.exists(f"{energon_ds}/.nv-meta/arrow")
    assert ds.sql("SELECT count(*) FROM samples").scalar() == 48


def test_results_convert_to_arrow_polars_pandas(energon_ds):
    ds = energon_arrow.open_dataset(energon_ds)
    res = ds.sql("SELECT shard_id, count(*) AS n FROM samples GROUP BY shard_id ORDER BY shard_id")
    assert isinstance(res.arrow(), pa.Table) and res.arrow().column("n").to_pylist() == [12] * 4
    assert isinstance(res.pl(), pl.DataFrame) and res.pl()["n"].to_list() == [12] * 4
    assert isinstance(res.df(), pd.DataFrame) and list(res.df()["n"]) == [12] * 4
    assert len(res) == 4 and res.columns == ["shard_id", "n"]
    assert ds.sql("SELECT count(*) FROM samples WHERE shard_id = ?", [2]).scalar() == 12
    extra = pa.table({"k": ["000001_000003", "nope"]})
    assert (
        ds.sql(
            "SELECT count(*) FROM samples JOIN wanted ON sample_key = k", tables={"wanted": extra}
        ).scalar()
        == 1
    )
    assert isinstance(ds.samples, pl.LazyFrame) and ds.samples.select(pl.len()).collect().item() == 48
    assert ds.parts.filter(pl.col("part_name") == "json").select(pl.len()).collect().item() == 48
    assert ds.shards.collect()["sample_count"].sum() == 48
    assert {"samples", "parts", "shards", "splits", "excluded", "split_samples", "part_types"} <= set(
        ds.views
    )


def test_part_types_and_sample_parts_views(energon_ds):
    ds = open_dataset(energon_ds)
    rows = {
        r[0]: r
        for r in ds.sql("SELECT part_name, parts, samples, total_bytes, min_bytes FROM part_types").rows()
    }
    assert set(rows) == {"jpg", "txt", "json"}
    assert rows["jpg"][1:] == (48, 48, 48 * 48, 48)
    row = ds.sql(
        "SELECT shard_path, content_size FROM sample_parts WHERE sample_key = '000002_000005' AND part_name = 'jpg'"
    ).rows()
    assert row == [("shards/shard-000002.tar", 48)]


def test_read_parts_returns_payloads(energon_ds):
    ds = open_dataset(energon_ds)
    parts = ds.read_parts("json", where="shard_id = 1")
    assert parts.num_rows == 12
    captions = ds.sql(
        "SELECT sample_key, json_extract_string(decode(content), '$.shard')::INT AS shard FROM j",
        tables={"j": parts},
    ).rows()
    assert {c[1] for c in captions} == {1}


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO samples VALUES (0, 0, 'x', 0, 0)",
        "DELETE FROM samples",
        "UPDATE samples SET byte_size = 0",
        "CREATE TABLE t AS SELECT 1",
        "DROP VIEW samples",
        "ATTACH 'other.db' AS o",
        "INSTALL httpfs",
        "LOAD json",
        "COPY samples TO 'out.csv'",
        "EXPORT DATABASE 'dump'",
        "SET threads = 1",
        "SELECT 1; DROP VIEW shards",
    ],
)
def test_modifying_statements_are_refused(energon_ds, sql):
    ds = open_dataset(energon_ds)
    with pytest.raises(ReadOnlyError, match="read-only"):
        ds.sql(sql)
    assert ds.sql("SELECT count(*) FROM samples").scalar() == 48


def test_reads_outside_the_index_are_refused(energon_ds):
    ds = open_dataset(energon_ds)
    with pytest.raises(QueryError, match="only the dataset's own index"):
        ds.sql(f"SELECT * FROM read_csv('{energon_ds}/.nv-meta/split.yaml')")


def test_errors_name_views_columns_and_statement(energon_ds):
    ds = open_dataset(energon_ds)
    with pytest.raises(QueryError) as e:
        ds.sql("SELECT * FROM sample")
    assert (
        "available views:" in str(e.value)
        and "split_samples" in str(e.value)
        and "FROM sample" in str(e.value)
    )
    with pytest.raises(QueryError) as e:
        ds.sql("SELECT sample_name FROM samples")
    assert "samples(shard_id, sample_index, sample_key, byte_offset, byte_size)" in str(e.value)
    with pytest.raises(QueryError) as e:
        ds.sql("SELEC count(*) FROM samples")
    assert "malformed SQL" in str(e.value) and "SELEC count(*) FROM samples" in str(e.value)


def test_not_prepared(tmp_path, energon_ds):
    with pytest.raises(Exception, match="energon-arrow prepare"):
        open_dataset(str(tmp_path))
    os.remove(f"{energon_ds}/.nv-meta/index.sqlite")
    with pytest.raises(
        NotPreparedError,
        match=r"neither a Parquet side index .* nor index.sqlite: run `energon-arrow prepare",
    ):
        open_dataset(energon_ds)


def test_stale_shard_is_named(energon_ds):
    open_dataset(energon_ds, publish=True)  # the conversion records the shards as they were
    with open(f"{energon_ds}/shards/shard-000002.tar", "ab") as f:
        f.write(b"\0" * 1024)
    with pytest.raises(
        StaleIndexError,
        match=r"shard-000002\.tar: shard changed since it was indexed \(size .*energon-arrow prepare",
    ):
        open_dataset(energon_ds)
    assert open_dataset(energon_ds, verify=False).sql("SELECT count(*) FROM samples").scalar() == 48


def test_missing_shard_is_stale(energon_ds):
    open_dataset(energon_ds, publish=True)
    os.remove(f"{energon_ds}/shards/shard-000001.tar")
    with pytest.raises(StaleIndexError, match=r"shard-000001\.tar: shard is in the index but missing"):
        open_dataset(energon_ds)


def test_new_energon_prepare_is_converted_again(energon_ds):
    ds = open_dataset(energon_ds, publish=True)
    assert ds.index_source.startswith("index.sqlite")
    with open(f"{energon_ds}/.nv-meta/index.uuid", "w") as f:
        f.write("00000000-0000-0000-0000-000000000000")
    assert open_dataset(energon_ds, publish=True).index_source == "index.sqlite (converted, published)"
    assert open_dataset(energon_ds).index_source == "parquet"


def test_sqlite_disagreeing_with_info_json(energon_ds):
    import json

    path = f"{energon_ds}/.nv-meta/.info.json"
    with open(path) as f:
        info = json.load(f)
    info["shard_counts"]["shards/shard-000003.tar"] = 11
    with open(path, "w") as f:
        json.dump(info, f, indent=2)
    with pytest.raises(
        ValueError, match=r"shard-000003\.tar has 12 samples in index.sqlite but 11 in .info.json"
    ):
        open_dataset(energon_ds)


def test_extra_tables_cannot_shadow_views(energon_ds):
    ds = open_dataset(energon_ds)
    with pytest.raises(QueryError, match="may not shadow the dataset's views: samples"):
        ds.sql("SELECT count(*) FROM samples", tables={"samples": pa.table({"x": [1]})})
    assert ds.sql("SELECT count(*) FROM samples").scalar() == 48
