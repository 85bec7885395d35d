"""Splits and exclusions: split.yaml order, brace expansion, excluded shards and `shard.tar/key` samples."""

from __future__ import annotations

import pytest

from energon_arrow.meta.errors import MetaError
from energon_arrow.query import QueryError, open_dataset
from energon_arrow.query.dataset import SPLIT_COLUMNS
from tests.query.conftest import write_split

SPLIT = """split_parts:
  train:
  - shards/shard-000003.tar
  - shards/shard-{000000..000001}.tar
  val:
  - shards/shard-000002.tar
  test: []
exclude:
- shards/shard-000001.tar
- shards/shard-000003.tar/000003_0000{01..03}
- shards/shard-000000.tar/000000_000011
- shards/shard-000000.tar/no_such_key
- shards/missing.tar/000000_000000
"""


def keys(shard, idxs):
    return [f"{shard:06d}_{i:06d}" for i in idxs]


def test_split_order_and_exclusions(energon_ds):
    write_split(energon_ds, SPLIT)
    ds = open_dataset(energon_ds)
    train = ds.split("train")
    assert train.column_names == SPLIT_COLUMNS
    expected = keys(3, [0, *range(4, 12)]) + keys(0, range(11))
    assert train.column("sample_key").to_pylist() == expected
    assert set(train.column("shard_path").to_pylist()) == {
        "shards/shard-000003.tar",
        "shards/shard-000000.tar",
    }
    assert train.column("sample_index").to_pylist()[:2] == [0, 4]
    assert ds.split("val").column("sample_key").to_pylist() == keys(2, range(12))
    assert ds.split("test").num_rows == 0
    row = ds.sql("SELECT byte_offset, byte_size FROM samples WHERE sample_key = '000003_000004'").rows()[0]
    assert (train.column("byte_offset")[1].as_py(), train.column("byte_size")[1].as_py()) == row


def test_splits_and_excluded_views(energon_ds):
    write_split(energon_ds, SPLIT)
    ds = open_dataset(energon_ds)
    assert ds.sql("SELECT split, position, path, excluded FROM splits ORDER BY split, position").rows() == [
        ("train", 0, "shards/shard-000003.tar", False),
        ("train", 1, "shards/shard-000000.tar", False),
        ("train", 2, "shards/shard-000001.tar", True),
        ("val", 0, "shards/shard-000002.tar", False),
    ]
    rows = ds.sql("SELECT entry, kind, sample_key, matched FROM excluded ORDER BY entry").rows()
    assert rows == [
        ("shards/missing.tar/000000_000000", "unknown", None, False),
        ("shards/shard-000000.tar/000000_000011", "sample", "000000_000011", True),
        ("shards/shard-000000.tar/no_such_key", "sample", "no_such_key", False),
        ("shards/shard-000001.tar", "shard", None, True),
        ("shards/shard-000003.tar/000003_000001", "sample", "000003_000001", True),
        ("shards/shard-000003.tar/000003_000002", "sample", "000003_000002", True),
        ("shards/shard-000003.tar/000003_000003", "sample", "000003_000003", True),
    ]
    counts = ds.sql("SELECT split, count(*) FROM split_samples GROUP BY split ORDER BY split").rows()
    assert counts == [("train", 20), ("val", 12)]


def test_split_parts_follow_split_order(energon_ds):
    write_split(energon_ds, SPLIT)
    ds = open_dataset(energon_ds)
    parts = ds.split_parts("train")
    assert parts.num_rows == 3 * ds.split("train").num_rows
    assert parts.column("sample_key").to_pylist()[:6] == ["000003_000000"] * 3 + ["000003_000004"] * 3
    assert parts.column("part_name").to_pylist()[:3] == ["jpg", "txt", "json"]


def test_unknown_split_lists_the_splits(energon_ds):
    ds = open_dataset(energon_ds)
    with pytest.raises(QueryError, match=r"no split 'dev' \(splits: train, val, test\)"):
        ds.split("dev")


def test_split_naming_unknown_shard(energon_ds):
    write_split(energon_ds, "split_parts:\n  train:\n  - shards/shard-000009.tar\nexclude: []\n")
    with pytest.raises(MetaError, match=r"split 'train' names shard 'shards/shard-000009.tar'"):
        open_dataset(energon_ds)


def test_other_split_config(energon_ds):
    with open(f"{energon_ds}/.nv-meta/alt.yaml", "w") as f:
        f.write("split_parts:\n  all:\n  - shards/shard-{000000..000003}.tar\n")
    ds = open_dataset(energon_ds, split_config="alt.yaml")
    assert ds.split_names == ["all"] and ds.split("all").num_rows == 48


def test_in_split_order_sorts_only_when_needed():
    import pyarrow as pa

    from energon_arrow.query.dataset import in_split_order

    shuffled = pa.table(
        {"shard_position": [1, 0, 0, 1], "sample_index": [0, 1, 0, 1], "k": ["c", "b", "a", "d"]}
    )
    assert in_split_order(shuffled).column("k").to_pylist() == ["a", "b", "c", "d"]
    ordered = pa.table({"shard_position": [0, 0, 1], "sample_index": [0, 2, 0], "k": ["a", "b", "c"]})
    assert in_split_order(ordered) is ordered
    n = 3000  # two threads' ordered runs interleaved: shard 1, then shards 0 and 2 -> three zero-copy slices
    pos, idx = [1] * n + [0] * n + [2] * n, list(range(n)) * 3
    runs = in_split_order(pa.table({"shard_position": pos, "sample_index": idx, "row": range(3 * n)}))
    assert runs.column("row").to_pylist() == [*range(n, 2 * n), *range(n), *range(2 * n, 3 * n)]
    assert runs.column("row").num_chunks == 3
