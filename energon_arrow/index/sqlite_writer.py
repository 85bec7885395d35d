"""`index.sqlite` exactly as energon 7.4.1 lays it out, written fast.

Tables `samples` and `sample_parts` with energon's DDL; the three secondary indexes are created after all inserts
(the UNIQUE autoindex on `sample_key` exists from the start, as in energon). The database is built in a local file
with journaling and syncing off (it is private until published), rows go in with large `executemany` batches
straight from numpy/Arrow columns.

`SqliteIndexWriter(path)`: `.add_shard(shard_id, shard_index)`, `.finish()` (indexes + commit + close),
`.abort()`. Duplicate keys across shards raise `DuplicateKeyError` naming the key and both shards.
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
_INSERT_SAMPLE = "INSERT INTO samples (tar_file_id, sample_key, sample_index, byte_offset, byte_size) VALUES (?, ?, ?, ?, ?)"
_INSERT_PART = (
    "INSERT INTO sample_parts (tar_file_id, sample_index, part_name, content_byte_offset, content_byte_size) "
    "VALUES (?, ?, ?, ?, ?)"
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


class SqliteIndexWriter:
    def __init__(self, path: str):
        self.path = path
        self.db = sqlite3.connect(path, isolation_level=None)
        for pragma in (
            "PRAGMA journal_mode = OFF",
            "PRAGMA synchronous = OFF",
            "PRAGMA locking_mode = EXCLUSIVE",
            "PRAGMA temp_store = MEMORY",
            "PRAGMA cache_size = -262144",
        ):
            self.db.execute(pragma)
        self.db.execute("BEGIN")
        self.db.execute(SAMPLES_DDL)
        self.db.execute(PARTS_DDL)
        self._shard_names: dict[int, str] = {}

    def add_shard(self, shard_id: int, shard_name: str, index) -> None:
        """Insert one shard's rows (`index`: an `energon_arrow.tar.ShardIndex` or compatible columns)."""
        self._shard_names[shard_id] = shard_name
        n = index.sample_count
        ids = [shard_id] * max(n, index.part_count)
        keys = index.sample_keys.to_pylist()
        try:
            self.db.executemany(
                _INSERT_SAMPLE,
                zip(
                    ids[:n],
                    keys,
                    range(n),
                    index.sample_offsets.tolist(),
                    index.sample_sizes.tolist(),
                ),
            )
        except sqlite3.IntegrityError:
            self._raise_duplicate(shard_id, keys)
        self.db.executemany(
            _INSERT_PART,
            zip(
                ids[: index.part_count],
                index.part_sample_index.tolist(),
                index.part_names.to_pylist(),
                index.part_offsets.tolist(),
                index.part_sizes.tolist(),
            ),
        )

    def _raise_duplicate(self, shard_id: int, keys: list[str]):
        seen: set[str] = set()
        for key in keys:
            if key in seen:
                raise DuplicateKeyError(key, self._shard_names[shard_id], None)
            seen.add(key)
            row = self.db.execute("SELECT tar_file_id FROM samples WHERE sample_key = ?", (key,)).fetchone()
            if row is not None:
                raise DuplicateKeyError(key, self._shard_names[shard_id], self._shard_names.get(row[0]))
        raise DuplicateKeyError(keys[0] if keys else "", self._shard_names[shard_id], None)

    def finish(self) -> None:
        for ddl in INDEX_DDL:
            self.db.execute(ddl)
        self.db.execute("COMMIT")
        self.db.close()

    def abort(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self.db.close()
