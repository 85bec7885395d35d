"""`ShardSlices`: one shard's rows from a multi-row-group side-index file, a row group at a time, equal to
filtering the whole table (shards cut by row-group boundaries, missing shards, files without statistics)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from energon_arrow.index.side_index import ShardSlices


@pytest.mark.parametrize("statistics", [True, False])
def test_rows_equal_a_filter(tmp_path, statistics):
    rng = np.random.default_rng(3)
    ids = np.sort(rng.choice([0, 1, 2, 4, 5, 9], size=200)).astype(np.int32)  # no shard 3, 6, 7, 8
    table = pa.table({"shard_id": ids, "value": np.arange(200, dtype=np.int64)})
    path = str(tmp_path / "t.parquet")
    pq.write_table(table, path, row_group_size=17, write_statistics=statistics)
    slices = ShardSlices(pq.ParquetFile(path))
    assert (slices.ranges is None) == (not statistics)
    for sid in [0, 1, 2, 3, 4, 5, 9, 2, 0]:  # in order, then back (row groups are read again)
        expected = table.filter(pc.equal(table.column("shard_id"), sid))
        assert slices.rows(sid).equals(expected)
        assert len(slices._groups) <= (1 if not statistics else 200 // 17 + 1)
    assert slices.read_all().equals(table)
