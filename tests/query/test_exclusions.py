"""Sample exclusions resolved once and cached beside the side index (query.exclusions), and the vectorised
classification of exclude entries against energon's rules (`SplitConfig.classify_excludes`)."""

from __future__ import annotations

import os

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from energon_arrow.adapters import open_storage
from energon_arrow.meta.split import SplitConfig
from energon_arrow.query import exclusions, open_dataset
from energon_arrow.query.exclusions import CACHE_KEY, SAMPLES_REL, bitmaps, cache_rel
from energon_arrow.query.splits import exclude_table
from energon_arrow.testing.synthetic import write_webdataset
from tests.query.conftest import write_split
from tests.query.test_splits import SPLIT, keys

CACHED = {  # the cache of SPLIT's sample entries: (shard_id, key) -> sample_index
    (0, "000000_000011"): 11,
    (0, "no_such_key"): None,
    (3, "000003_000001"): 1,
    (3, "000003_000002"): 2,
    (3, "000003_000003"): 3,
}


def _cache(root: str, split_config: str = "split.yaml"):
    path = os.path.join(root, cache_rel(split_config))
    return path, pq.read_table(path) if os.path.exists(path) else None


def _train(root: str) -> list[str]:
    with open_dataset(root, publish=True) as ds:
        return ds.split("train").column("sample_key").to_pylist()


def test_resolved_once_cached_and_invalidated(energon_ds):
    write_split(energon_ds, SPLIT)
    with open_dataset(energon_ds, publish=True) as ds:
        ds.sql("SELECT count(*) FROM samples")  # no exclusion view: nothing resolved
        assert _cache(energon_ds)[1] is None
        assert ds.sql("SELECT count(*) FROM split_samples WHERE split = 'train'").rows() == [(20,)]
    path, table = _cache(energon_ds)
    rows = zip(*(table.column(c).to_pylist() for c in ("shard_id", "sample_key", "sample_index")))
    assert {(s, k): i for s, k, i in rows} == CACHED
    expected = keys(3, [0, *range(4, 12)]) + keys(0, range(11))
    stamp = os.stat(path).st_mtime_ns
    assert _train(energon_ds) == expected
    assert os.stat(path).st_mtime_ns == stamp  # read, not computed again

    write_split(energon_ds, SPLIT.replace("- shards/shard-000000.tar/000000_000011\n", ""))
    assert _train(energon_ds) == keys(3, [0, *range(4, 12)]) + keys(0, range(12))
    cached = _cache(energon_ds)[1]  # computed again for the new entries
    assert "000000_000011" not in cached.column("sample_key").to_pylist() and cached.num_rows == 4

    with open(path, "wb") as f:
        f.write(b"not parquet")
    assert _train(energon_ds) == keys(3, [0, *range(4, 12)]) + keys(0, range(12))
    assert _cache(energon_ds)[1].num_rows == 4  # replaced


def test_cache_of_another_side_index_is_ignored(energon_ds):
    write_split(energon_ds, SPLIT)
    with open_dataset(energon_ds, publish=True) as ds:
        ds.split("train")
    path, table = _cache(energon_ds)
    forged = table.set_column(2, "sample_index", table.column("sample_index").fill_null(5))
    pq.write_table(forged.replace_schema_metadata({CACHE_KEY: b"another side index"}), path)
    with open_dataset(energon_ds, publish=True) as ds:
        matched = ds.sql("SELECT entry, matched FROM excluded WHERE kind = 'sample' ORDER BY entry").rows()
        assert ("shards/shard-000000.tar/no_such_key", False) in matched
        assert ds.split("train").num_rows == 20
    assert _cache(energon_ds)[1].equals(table)


def test_cache_key_includes_the_recorded_samples_digest(tmp_path):
    """With a manifest, a cache is keyed by the samples table's recorded SHA-256 too: a cache stored under the
    side index's identity alone (computed from other sample keys than those recorded now) is not used."""
    from energon_arrow.index.prepare import PrepareOptions, prepare_dataset
    from energon_arrow.meta import parse_split_ratio
    from energon_arrow.meta.manifest import manifest_of

    root = str(tmp_path / "ds")
    write_webdataset(root, shards=4, samples_per_shard=12, image_bytes=48)
    prepare_dataset(root, PrepareOptions(split_ratio=parse_split_ratio("3,1,0"), num_workers=1))
    write_split(root, SPLIT)
    expected = _train(root)
    path, table = _cache(root)
    with open_dataset(root) as ds:
        identity = ds._side.identity()
    key = table.schema.metadata[CACHE_KEY]
    assert key.startswith(identity) and manifest_of(open_storage(root)).digest(SAMPLES_REL).encode() in key
    forged = table.set_column(2, "sample_index", table.column("sample_index").fill_null(5))
    pq.write_table(forged.replace_schema_metadata({CACHE_KEY: identity}), path)
    assert _train(root) == expected
    assert _cache(root)[1].schema.metadata[CACHE_KEY] == key  # computed again and replaced


def test_read_only_open_does_not_write_the_cache(energon_ds):
    write_split(energon_ds, SPLIT)
    open_dataset(energon_ds, publish=True).close()  # publishes the side index converted from index.sqlite
    with open_dataset(energon_ds, publish=False) as ds:
        assert ds.split("train").num_rows == 20
    assert _cache(energon_ds)[1] is None


SHARDS = ["a.tar", "b.tar", "dir/c.tar", "dir/c.tar/d.tar", "x/y.tar"]


@pytest.mark.parametrize(
    "entries",
    [
        [],
        ["a.tar", "a.tar"],  # shards at the root (no `/`): failed before the vectorised rewrite
        ["b.tar/k1", "a.tar", "b.tar/k1", "a.tar/k0", "b.tar/k0", "x/y.tar"],
        ["dir/c.tar/key/with/slash", "dir/c.tar/d.tar/k", "dir/c.tar/k2", "dir/c.tar/d.tar", "x/y.tar/"],
        ["zzz", "nope/k", "zzz", "a.tar/é", "b.tar/a b", "/a.tar", "a.tar/k/"],
    ],
)
def test_exclude_table_follows_classify_excludes(entries):
    table = exclude_table(entries, SHARDS)
    whole, samples = SplitConfig({}, entries).classify_excludes(SHARDS)
    rows = table.to_pylist()
    assert [r["path"] for r in rows if r["kind"] == "shard"] == sorted(whole, key=SHARDS.index)
    got = [(r["path"], r["sample_key"]) for r in rows if r["kind"] == "sample"]
    assert got == sorted(
        ((p, k) for p, ks in samples.items() for k in ks), key=lambda x: (SHARDS.index(x[0]), x[1])
    )
    assert all(r["entry"] == f"{r['path']}/{r['sample_key']}" and SHARDS[r["shard_id"]] == r["path"]
               for r in rows if r["kind"] == "sample")  # fmt: skip
    placed = whole | {f"{p}/{k}" for p, ks in samples.items() for k in ks}
    assert [r["entry"] for r in rows if r["kind"] == "unknown"] == [
        e for e in dict.fromkeys(entries) if e not in placed
    ]


def test_split_sizes_count_without_rows(energon_ds):
    write_split(energon_ds, SPLIT)
    with open_dataset(energon_ds, publish=True) as ds:
        sizes = ds.sql("SELECT * FROM split_sizes ORDER BY split").arrow().to_pylist()
        rows = dict(ds.sql("SELECT split, count(*) FROM split_samples GROUP BY split").rows())
    assert sizes == [
        {"split": "train", "shards": 3, "excluded_shards": 1, "samples": 36, "effective_samples": 20},
        {"split": "val", "shards": 1, "excluded_shards": 0, "samples": 12, "effective_samples": 12},
    ]
    assert {s["split"]: s["effective_samples"] for s in sizes} == rows


def test_bitmaps_and_unresolved_views(energon_ds):
    resolved = pa.table(
        {"shard_id": pa.array([1, 1, 0, None], pa.int32()), "sample_index": [0, 9, None, None]}
    )
    table = bitmaps(resolved, np.array([3, 4]))
    assert table.to_pylist() == [{"shard_id": 1, "bits": b"\x80\x40"}]  # 10 bits: index 9 > the 4 samples
    write_split(energon_ds, SPLIT)
    with open_dataset(energon_ds, publish=True) as ds:
        with pytest.raises(duckdb.Error, match="not resolved"):
            ds._internal("SELECT count(*) FROM split_samples")  # internal SQL: no automatic resolution
        assert ds.sql("SELECT count(*) FROM split_samples").scalar() == 32


def test_matched_in_batches(energon_ds, monkeypatch):
    """Entries are matched a batch of consecutive entries (a range of shards) at a time: 2 per batch here."""
    monkeypatch.setattr(exclusions, "MATCH_BATCH", 2)
    write_split(energon_ds, SPLIT)
    with open_dataset(energon_ds, publish=True) as ds:
        ds.exclusions()
    table = _cache(energon_ds)[1]
    rows = zip(*(table.column(c).to_pylist() for c in ("shard_id", "sample_key", "sample_index")))
    assert {(s, k): i for s, k, i in rows} == CACHED
