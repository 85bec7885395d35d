"""The side index's summary (`.nv-meta/arrow/summary.parquet`): prepare writes it, `part_types` and `info` answer
from it without reading sample or part rows, older side indexes get it computed once and cached, a summary that
describes another index is ignored."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from energon_arrow.index.summary import SUMMARY_KEY, summarize, summarize_batches
from energon_arrow.meta.manifest import MANIFEST_REL, IntegrityError
from energon_arrow.query import open_dataset
from energon_arrow.query.catalog import PART_TYPES_SCAN
from energon_arrow.query.info import dataset_info
from energon_arrow.testing.synthetic import write_webdataset
from tests.query.conftest import write_split
from tests.query.test_own_prepare import prepare

SUMMARY = ".nv-meta/arrow/summary.parquet"
COLUMNS = ["shard_id", "sample_index", "part_name", "content_size"]


def _direct(table: pa.Table) -> list[tuple]:
    """The summary rows counted one part at a time."""
    groups: dict = {}
    for shard, index, name, size in zip(*(table.column(c).to_pylist() for c in COLUMNS)):
        g = groups.setdefault((shard, name), [0, set(), 0, [], []])
        g[0] += 1
        g[1].add(index)
        g[2] += size
        g[3].append(size)
    return sorted((s, n, g[0], len(g[1]), g[2], min(g[3]), max(g[3])) for (s, n), g in groups.items())


@pytest.mark.parametrize("seed", range(30))
def test_summarize_matches_a_direct_count(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    shard = np.sort(rng.integers(0, 4, n)).astype(np.int32)
    index = np.zeros(n, np.int64)
    for s in np.unique(shard):
        index[shard == s] = np.sort(rng.integers(0, 5, int((shard == s).sum())))
    table = pa.table({"shard_id": shard, "sample_index": index,
                      "part_name": pa.array(rng.choice(["jpg", "txt", "json", "cls"], n)).dictionary_encode(),
                      "content_size": rng.integers(0, 100, n)})  # fmt: skip
    expected = _direct(table)
    assert [tuple(r.values()) for r in summarize(table).to_pylist()] == expected
    for size in (1, 2, 7):  # batches cut shards and samples anywhere; each batch has its own dictionary
        got = summarize_batches(table.to_batches(max_chunksize=size))
        assert [tuple(r.values()) for r in got.to_pylist()] == expected
    assert summarize_batches([]).num_rows == 0


@pytest.fixture
def prepared(tmp_path):
    root = str(tmp_path / "ds")
    write_webdataset(root, shards=4, samples_per_shard=7, image_bytes=40)
    prepare(root)
    return root


def _part_types(ds, sql: str) -> list[tuple]:
    return ds.sql(f"SELECT part_name::VARCHAR, parts, samples, total_bytes, min_bytes, avg_bytes, max_bytes "
                  f"FROM ({sql})").rows()  # fmt: skip


def test_prepare_writes_the_summary_and_part_types_reads_it(prepared):
    with open_dataset(prepared) as ds:
        assert ds._side.summary
        parts = pq.read_table(f"{prepared}/.nv-meta/arrow/parts.parquet")
        assert [tuple(r.values()) for r in pq.read_table(f"{prepared}/{SUMMARY}").to_pylist()] == _direct(
            parts
        )
        # the same rows as the DISTINCT over every part row it replaces
        assert _part_types(ds, "SELECT * FROM part_types") == _part_types(ds, PART_TYPES_SCAN)
        assert [r[:3] for r in _part_types(ds, "SELECT * FROM part_types")] == [
            ("jpg", 28, 28), ("json", 28, 28), ("txt", 28, 28)]  # fmt: skip


def _unreadable_rows(path: str) -> None:
    """Overwrite a Parquet file's data pages with zeros, keeping its footer (schema, row counts) readable."""
    with open(path, "rb") as f:
        data = bytearray(f.read())
    footer = int.from_bytes(data[-8:-4], "little")
    data[4 : len(data) - footer - 8] = bytes(len(data) - footer - 12)
    with open(path, "wb") as f:
        f.write(data)


def test_info_reads_no_sample_or_part_rows(prepared):
    split = "split_parts:\n  train:\n  - shards/shard-000000.tar\n  - shards/shard-000001.tar\n  val:\n" \
            "  - shards/shard-000002.tar\n  - shards/shard-000003.tar\nexclude:\n- shards/shard-000001.tar\n"  # fmt: skip
    write_split(prepared, split)
    with open_dataset(prepared) as ds:
        before = dataset_info(ds)
    for name in ("samples", "parts"):
        _unreadable_rows(f"{prepared}/.nv-meta/arrow/{name}.parquet")
    with open_dataset(prepared) as ds:
        with pytest.raises(Exception):  # noqa: B017 - the rows are gone: any read of them fails
            ds.sql("SELECT sum(content_size) FROM parts")
        assert dataset_info(ds) == before
    assert [(s["name"], s["effective_samples"]) for s in before["splits"]] == [("train", 7), ("val", 14)]
    assert before["exclude"] == {"shard": {"entries": 1, "unmatched": 0}}


def test_older_index_gets_the_summary_once(prepared):
    with open_dataset(prepared) as ds:
        expected = dataset_info(ds)
        part_types = _part_types(ds, "SELECT * FROM part_types")
    written = pq.read_table(f"{prepared}/{SUMMARY}")
    os.remove(f"{prepared}/{SUMMARY}")  # as an earlier version wrote the side index
    os.remove(f"{prepared}/{MANIFEST_REL}")  # (and no manifest)
    with open_dataset(prepared, publish=True) as ds:  # a writer's open caches it
        assert not ds._side.summary
        assert _part_types(ds, "SELECT * FROM part_types") == part_types  # by a scan until info
        assert dataset_info(ds) == expected
        assert _part_types(ds, "SELECT * FROM part_types") == part_types  # from the computed summary
    assert pq.read_table(f"{prepared}/{SUMMARY}").equals(written)  # cached for the next open
    with open_dataset(prepared) as ds:
        assert ds._side.summary


def test_summary_of_another_index_is_ignored(prepared, tmp_path):
    other = str(tmp_path / "other")
    write_webdataset(other, shards=4, samples_per_shard=5, image_bytes=40)
    prepare(other)
    shutil.copy(f"{other}/{SUMMARY}", f"{prepared}/{SUMMARY}")  # left behind by a tool that knew no summary
    with pytest.raises(IntegrityError, match="summary.parquet: differs from what prepare recorded"):
        open_dataset(prepared)  # the manifest says it is not the summary prepare wrote
    os.remove(f"{prepared}/{MANIFEST_REL}")  # nor a manifest: the summary's own identity tells
    meta = pq.read_metadata(f"{prepared}/{SUMMARY}").metadata
    with open_dataset(prepared, publish=True) as ds:  # a writer's open caches it
        assert not ds._side.summary
        assert meta[SUMMARY_KEY] != ds._side.identity()
        info = dataset_info(ds)
    assert [p["parts"] for p in info["part_types"]] == [28, 28, 28]
    assert SUMMARY_KEY in pq.read_metadata(f"{prepared}/{SUMMARY}").metadata
    with open_dataset(prepared) as ds:
        assert ds._side.summary  # recomputed and cached


def test_converted_energon_index_in_memory(energon_ds):
    with open_dataset(energon_ds, publish=True) as ds:  # converted and published with its summary
        assert ds._side.summary and os.path.exists(f"{energon_ds}/{SUMMARY}")
        published = dataset_info(ds)
    shutil.rmtree(f"{energon_ds}/.nv-meta/arrow")
    with open_dataset(energon_ds, publish=False) as ds:  # converted in memory: computed from the tables
        assert not ds._side.summary
        info = dataset_info(ds)
    assert not os.path.exists(f"{energon_ds}/.nv-meta/arrow")
    assert {k: v for k, v in info.items() if k != "index"} == {
        k: v for k, v in published.items() if k != "index"
    }
