"""`index.sqlite` exactly as energon 7.4.1 lays it out, written fast.

`IndexSqliteBuilder(path)` creates energon's tables (the UNIQUE autoindex on `sample_key` included) and its three
secondary indexes up front: rows arrive in index order (tar_file_id, sample_index, offset), so the indexes are
appended to while shards are merged, in shard order, as the workers finish them (`add_shard`: one transaction per
shard, multi-row INSERT statements straight from the numpy/Arrow columns, about half the cost of executemany).
A key already present in an earlier shard rolls the shard back and raises `DuplicateKeyError` naming both shards
(so `--skip-bad-shards` can leave it out). The file is private until published: no fsync.
"""

from __future__ import annotations

import contextlib
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


_MAX_VARIABLES = 32766  # SQLite's default limit on bound variables per statement


def _values_sql(table: str, rows: int, columns: int, verb: str = "INSERT") -> str:
    row = "(" + ",".join("?" * columns) + ")"
    return f"{verb} INTO {table} VALUES " + ",".join([row] * rows)


def insert_columns(db, table: str, columns: list[list], verb: str = "INSERT") -> None:
    """Insert rows given as columns with multi-row statements (half the cost of executemany per row); `verb`:
    "INSERT", "INSERT OR REPLACE", ..."""
    n, width = len(columns[0]), len(columns)
    if n == 0:
        return
    flat: list = [None] * (n * width)
    for j, col in enumerate(columns):
        flat[j::width] = col
    step = _MAX_VARIABLES // width
    full = _values_sql(table, step, width, verb) if n >= step else None
    for start in range(0, n, step):
        rows = min(step, n - start)
        sql = full if rows == step else _values_sql(table, rows, width, verb)
        db.execute(sql, flat[start * width : (start + rows) * width])


_FAST_PRAGMAS = (
    "PRAGMA synchronous = OFF",
    "PRAGMA locking_mode = EXCLUSIVE",
    "PRAGMA temp_store = MEMORY",
    "PRAGMA cache_size = -262144",
)


def create_schema(db) -> None:
    """energon's tables and indexes (no-ops where they exist). energon creates its indexes after the inserts;
    here rows arrive in index order (tar_file_id, sample_index, offset), so maintaining them while merging costs
    little and overlaps with the reading. One transaction (`db` in autocommit mode): five would each commit, and
    without `synchronous = OFF` sync, the new file (~50 ms)."""
    db.execute("BEGIN")
    for ddl in (SAMPLES_DDL, PARTS_DDL, *INDEX_DDL):
        db.execute(ddl)
    db.execute("COMMIT")


class IndexSqliteBuilder:
    """Builds the final `index.sqlite` shard by shard, one transaction per shard. `path` may already hold
    energon's schema and rows (`names`: tar_file_id -> shard of those rows, for duplicate-key errors)."""

    def __init__(self, path: str, names: dict[int, str] | None = None):
        # check_same_thread: prepare finishes (closes) it on a helper thread, never two threads at once
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode = MEMORY")  # a shard with a duplicate key is rolled back
        for pragma in _FAST_PRAGMAS:
            self.db.execute(pragma)
        create_schema(self.db)
        self._names: dict[int, str] = dict(names or {})

    def add_shard(self, tar_file_id: int, shard: str, index) -> None:
        """Insert one shard's rows (`index`: an `energon_arrow.tar.ShardIndex`) as one transaction."""
        db = self.db
        n, m = index.sample_count, index.part_count
        ids = [tar_file_id] * max(n, m)
        keys = index.sample_keys.to_pylist()
        db.execute("BEGIN")
        try:
            insert_columns(
                db,
                "samples",
                [ids[:n], keys, list(range(n)), index.sample_offsets.tolist(), index.sample_sizes.tolist()],
            )
        except sqlite3.IntegrityError:
            db.execute("ROLLBACK")
            self._raise_duplicate(shard, keys)
        insert_columns(
            db,
            "sample_parts",
            [
                ids[:m],
                index.part_sample_index.tolist(),
                index.part_names.to_pylist(),
                index.part_offsets.tolist(),
                index.part_sizes.tolist(),
            ],
        )
        db.execute("COMMIT")
        self._names[tar_file_id] = shard

    def _raise_duplicate(self, shard: str, keys: list[str]):
        for start in range(0, len(keys), 900):
            chunk = keys[start : start + 900]
            row = self.db.execute(
                f"SELECT sample_key, tar_file_id FROM samples WHERE sample_key IN ({','.join('?' * len(chunk))}) "
                "LIMIT 1",
                chunk,
            ).fetchone()
            if row is not None:
                raise DuplicateKeyError(row[0], shard, self._names.get(row[1]))
        raise DuplicateKeyError(keys[0] if keys else "", shard, None)

    def finish(self) -> None:
        self.db.close()

    def abort(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self.db.close()
