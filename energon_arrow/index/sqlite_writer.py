"""`index.sqlite` exactly as energon 7.4.1 lays it out, written fast.

Rows are bound by the processes that index the shards: each writes one small scratch database per shard
(`write_shard_rows`, multi-row INSERT statements, no constraints, no journal). The main process merges them in
shard order as they arrive, in C (`IndexSqliteBuilder.add_shard`: `INSERT ... SELECT` into energon's DDL, the UNIQUE
autoindex on `sample_key` included), while other shards are still being read; `finish()` builds energon's three
secondary indexes. A key already present in an earlier shard raises `DuplicateKeyError` naming both shards, and
that shard's rows are rolled back (so `--skip-bad-shards` can leave it out).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3

SAMPLES_DDL = """
                CREATE TABLE IF NOT EXISTS samples (
                    tar_file_id INTEGER NOT NULL,
                    sample_key TEXT NOT NULL UNIQUE,
                    sample_index INTEGER NOT NULL,
                    byte_offset INTEGER,
                    byte_size INTEGER
                )
                """
PARTS_DDL = """
                CREATE TABLE IF NOT EXISTS sample_parts (
                    tar_file_id INTEGER,
                    sample_index INTEGER,
                    part_name TEXT,
                    content_byte_offset INTEGER,
                    content_byte_size INTEGER
                )
                """
INDEX_DDL = (
    "CREATE INDEX IF NOT EXISTS idx_samples_by_tar_and_idx ON samples(tar_file_id, sample_index)",
    "CREATE INDEX IF NOT EXISTS idx_sample_parts_seq ON sample_parts(tar_file_id, sample_index, content_byte_offset)",
    "CREATE INDEX IF NOT EXISTS idx_sample_parts_full ON sample_parts(tar_file_id, sample_index, part_name, content_byte_offset, content_byte_size)",
)


class DuplicateKeyError(ValueError):
    """The same sample key occurs in two shards (energon's keys are global)."""

    def __init__(self, key: str, shard: str, other: str | None):
        where = f"shards {other!r} and {shard!r}" if other and other != shard else f"shard {shard!r}"
        super().__init__(
            f"duplicate sample key {key!r} in {where}: sample keys must be unique across the dataset "
            "(put each shard's members in a folder named after the shard, or exclude one shard)"
        )
        self.key = key
        self.shard = shard
        self.other = other


_ROWS_PER_STATEMENT = 32766 // 4  # SQLite's default limit on bound variables per statement


def _values_sql(table: str, rows: int, columns: int) -> str:
    row = "(" + ",".join("?" * columns) + ")"
    return f"INSERT INTO {table} VALUES " + ",".join([row] * rows)


def _insert(db, table: str, columns: list[list]) -> None:
    """Insert rows given as columns with multi-row statements (half the cost of executemany per row)."""
    n, width = len(columns[0]), len(columns)
    if n == 0:
        return
    flat: list = [None] * (n * width)
    for j, col in enumerate(columns):
        flat[j::width] = col
    step = _ROWS_PER_STATEMENT
    full = _values_sql(table, step, width) if n >= step else None
    for start in range(0, n, step):
        rows = min(step, n - start)
        sql = full if rows == step else _values_sql(table, rows, width)
        db.execute(sql, flat[start * width : (start + rows) * width])


_FAST_PRAGMAS = (
    "PRAGMA synchronous = OFF",
    "PRAGMA locking_mode = EXCLUSIVE",
    "PRAGMA temp_store = MEMORY",
    "PRAGMA cache_size = -262144",
)


def write_shard_rows(path: str, index) -> None:
    """One shard's rows (`index`: an `energon_arrow.tar.ShardIndex`) into a new scratch database at `path`."""
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode = OFF")
        for pragma in _FAST_PRAGMAS:
            db.execute(pragma)
        db.execute(
            "CREATE TABLE s (sample_key TEXT, sample_index INTEGER, byte_offset INTEGER, byte_size INTEGER)"
        )
        db.execute(
            "CREATE TABLE p (sample_index INTEGER, part_name TEXT, content_byte_offset INTEGER, "
            "content_byte_size INTEGER)"
        )
        n = index.sample_count
        db.execute("BEGIN")
        _insert(
            db,
            "s",
            [
                index.sample_keys.to_pylist(),
                list(range(n)),
                index.sample_offsets.tolist(),
                index.sample_sizes.tolist(),
            ],
        )
        _insert(
            db,
            "p",
            [
                index.part_sample_index.tolist(),
                index.part_names.to_pylist(),
                index.part_offsets.tolist(),
                index.part_sizes.tolist(),
            ],
        )
        db.execute("COMMIT")
    finally:
        db.close()


class IndexSqliteBuilder:
    """Assembles the final `index.sqlite` from per-shard scratch databases, one transaction per shard."""

    def __init__(self, path: str):
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode = MEMORY")  # a shard with a duplicate key is rolled back
        for pragma in _FAST_PRAGMAS:
            self.db.execute(pragma)
        self.db.execute(SAMPLES_DDL)
        self.db.execute(PARTS_DDL)
        self._names: dict[int, str] = {}

    def add_shard(self, tar_file_id: int, shard: str, scratch: str) -> None:
        """Merge one shard's scratch database (then deleted) under `tar_file_id`."""
        db = self.db
        db.execute("ATTACH DATABASE ? AS w", (scratch,))
        try:
            db.execute("BEGIN")
            try:
                db.execute(
                    "INSERT INTO samples SELECT ?, sample_key, sample_index, byte_offset, byte_size FROM w.s",
                    (tar_file_id,),
                )
                db.execute(
                    "INSERT INTO sample_parts SELECT ?, sample_index, part_name, content_byte_offset, "
                    "content_byte_size FROM w.p",
                    (tar_file_id,),
                )
            except sqlite3.IntegrityError:
                db.execute("ROLLBACK")
                row = db.execute(
                    "SELECT s.sample_key, m.tar_file_id FROM w.s AS s JOIN samples AS m USING (sample_key) LIMIT 1"
                ).fetchone()
                if row is None:
                    raise
                raise DuplicateKeyError(row[0], shard, self._names.get(row[1])) from None
            db.execute("COMMIT")
        finally:
            db.execute("DETACH DATABASE w")
        with contextlib.suppress(OSError):
            os.remove(scratch)
        self._names[tar_file_id] = shard

    def finish(self) -> None:
        self.db.execute("BEGIN")
        for ddl in INDEX_DDL:
            self.db.execute(ddl)
        self.db.execute("COMMIT")
        self.db.close()

    def abort(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self.db.close()
