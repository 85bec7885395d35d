"""Sample keys unique across the dataset, checked without index.sqlite (`prepare --no-energon-index`).

energon's index.sqlite enforces it with a UNIQUE constraint, which prepare turns into `DuplicateKeyError` per
shard. Without that file the check runs once over the finished `samples.parquet` in DuckDB (a GROUP BY on the key
with the bounded memory limit of `energon_arrow.query.limits`, spilling beyond it), and fails the prepare naming
the key and both shards.
"""

from __future__ import annotations

import duckdb

from energon_arrow.index.sqlite_writer import DuplicateKeyError
from energon_arrow.query.catalog import DUCKDB_CONFIG
from energon_arrow.query.limits import QueryLimits


def check_unique_keys(samples_parquet: str, shard_paths: list[str]) -> None:
    """Raise DuplicateKeyError for the first duplicated key (by key) of `samples_parquet`; `shard_paths`:
    shard_id -> shard path."""
    con = duckdb.connect(":memory:", config=DUCKDB_CONFIG)
    try:
        QueryLimits().apply(con)
        row = con.execute(
            "SELECT sample_key, min(shard_id), max(shard_id) FROM read_parquet(?) GROUP BY sample_key "
            "HAVING count(*) > 1 ORDER BY sample_key LIMIT 1",
            [samples_parquet],
        ).fetchall()
    finally:
        con.close()
    if row:
        key, first, last = row[0]
        raise DuplicateKeyError(key, shard_paths[last], shard_paths[first])
