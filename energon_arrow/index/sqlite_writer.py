"""`index.sqlite` exactly as energon 7.4.1 lays it out, written fast.

Rows are bound by the processes that index the shards: each appends its shards' rows to a private scratch
database (`ScratchWriter`, one per process/thread, committed per shard, no constraints, journaling off). The
final database is then assembled in C by `build_index_sqlite`: energon's DDL (the UNIQUE autoindex on
`sample_key` included), `INSERT ... SELECT` from every scratch database (tar_file_ids remapped when shards were
left out), then energon's three secondary indexes. Duplicate keys across shards raise `DuplicateKeyError` naming
the key and both shards.
"""

from __future__ import annotations

import contextlib
import glob
import os
import sqlite3
import threading

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
_FAST_PRAGMAS = (
    "PRAGMA journal_mode = OFF",
    "PRAGMA synchronous = OFF",
    "PRAGMA locking_mode = EXCLUSIVE",
    "PRAGMA temp_store = MEMORY",
    "PRAGMA cache_size = -262144",
)
_SCRATCH_PREFIX = "scratch-"


class DuplicateKeyError(ValueError):
    """The same sample key occurs in two shards (energon's keys are global)."""

    def __init__(self, key: str, shard: str, other: str | None, shard_id: int = -1):
        where = f"shards {other!r} and {shard!r}" if other and other != shard else f"shard {shard!r}"
        super().__init__(
            f"duplicate sample key {key!r} in {where}: sample keys must be unique across the dataset "
            "(put each shard's members in a folder named after the shard, or exclude one shard)"
        )
        self.key = key
        self.shard = shard
        self.other = other
        self.shard_id = shard_id  # provisional id of the later shard


class ScratchWriter:
    """Append-only rows of some shards, in a private file (`s` = samples, `p` = sample_parts)."""

    def __init__(self, path: str):
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        for pragma in _FAST_PRAGMAS[:2] + _FAST_PRAGMAS[3:]:
            self.db.execute(pragma)
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS s (tar_file_id INTEGER, sample_key TEXT, sample_index INTEGER, "
            "byte_offset INTEGER, byte_size INTEGER)"
        )
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS p (tar_file_id INTEGER, sample_index INTEGER, part_name TEXT, "
            "content_byte_offset INTEGER, content_byte_size INTEGER)"
        )

    def add(self, shard_id: int, index) -> None:
        """Insert one shard's rows (`index`: an `energon_arrow.tar.ShardIndex`) as one transaction."""
        n, m = index.sample_count, index.part_count
        ids = [shard_id] * max(n, m)
        self.db.execute("BEGIN")
        self.db.executemany(
            "INSERT INTO s VALUES (?, ?, ?, ?, ?)",
            zip(
                ids[:n],
                index.sample_keys.to_pylist(),
                range(n),
                index.sample_offsets.tolist(),
                index.sample_sizes.tolist(),
            ),
        )
        self.db.executemany(
            "INSERT INTO p VALUES (?, ?, ?, ?, ?)",
            zip(
                ids[:m],
                index.part_sample_index.tolist(),
                index.part_names.to_pylist(),
                index.part_offsets.tolist(),
                index.part_sizes.tolist(),
            ),
        )
        self.db.execute("COMMIT")

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self.db.close()


_writers: dict[tuple[str, int, int], ScratchWriter] = {}
_writers_lock = threading.Lock()


def scratch_writer(folder: str) -> ScratchWriter:
    """The calling process's (and thread's) scratch writer in `folder`, created on first use."""
    key = (folder, os.getpid(), threading.get_ident())
    with _writers_lock:
        writer = _writers.get(key)
        if writer is None:
            path = os.path.join(folder, f"{_SCRATCH_PREFIX}{os.getpid()}-{threading.get_ident()}.sqlite")
            writer = _writers[key] = ScratchWriter(path)
        return writer


def close_scratch_writers(folder: str) -> None:
    with _writers_lock:
        for key in [k for k in _writers if k[0] == folder]:
            _writers.pop(key).close()


def scratch_files(folder: str) -> list[str]:
    return sorted(glob.glob(os.path.join(folder, f"{_SCRATCH_PREFIX}*.sqlite")))


def _attach_all(db, paths):
    for i, p in enumerate(paths):
        db.execute(f"ATTACH DATABASE ? AS w{i}", (p,))


def find_duplicate(paths: list[str], keep: set[int] | None) -> tuple[str, int, int] | None:
    """(key, first shard id, later shard id) of a key present in two kept shards, or None."""
    with contextlib.closing(sqlite3.connect(":memory:", isolation_level=None)) as db:
        for i in range(0, len(paths), 8):
            chunk = paths[i : i + 8]
            _attach_all(db, chunk)
            db.execute("CREATE TEMP TABLE IF NOT EXISTS k (sample_key TEXT, tar_file_id INTEGER)")
            for j in range(len(chunk)):
                db.execute(f"INSERT INTO k SELECT sample_key, tar_file_id FROM w{j}.s")
            for j in range(len(chunk)):
                db.execute(f"DETACH DATABASE w{j}")
        where = "" if keep is None else f"WHERE tar_file_id IN ({','.join(map(str, sorted(keep)))})"
        row = db.execute(
            f"SELECT sample_key, min(tar_file_id), max(tar_file_id) FROM k {where} "
            "GROUP BY sample_key HAVING count(*) > 1 ORDER BY max(tar_file_id) LIMIT 1"
        ).fetchone()
    return None if row is None else (row[0], int(row[1]), int(row[2]))


def build_index_sqlite(path: str, scratch: list[str], id_map: dict[int, int], names: dict[int, str]) -> None:
    """Assemble `path` from the scratch databases. `id_map`: provisional shard id -> final tar_file_id (shards
    missing from it are left out); `names`: provisional id -> shard path (for error messages)."""
    identity = all(k == v for k, v in id_map.items())
    db = sqlite3.connect(path, isolation_level=None)
    try:
        for pragma in _FAST_PRAGMAS:
            db.execute(pragma)
        db.execute(SAMPLES_DDL)
        db.execute(PARTS_DDL)
        if not identity or len(id_map) < len(names):
            db.execute("CREATE TEMP TABLE idmap (old INTEGER PRIMARY KEY, new INTEGER)")
            db.executemany("INSERT INTO idmap VALUES (?, ?)", id_map.items())
        remap = not identity or len(id_map) < len(names)
        for p in scratch:
            db.execute("ATTACH DATABASE ? AS w", (p,))
            db.execute("BEGIN")
            try:
                if remap:
                    db.execute(
                        "INSERT INTO samples SELECT m.new, s.sample_key, s.sample_index, s.byte_offset, s.byte_size "
                        "FROM w.s AS s JOIN idmap AS m ON s.tar_file_id = m.old"
                    )
                    db.execute(
                        "INSERT INTO sample_parts SELECT m.new, p.sample_index, p.part_name, "
                        "p.content_byte_offset, p.content_byte_size FROM w.p AS p JOIN idmap AS m "
                        "ON p.tar_file_id = m.old"
                    )
                else:
                    db.execute("INSERT INTO samples SELECT * FROM w.s")
                    db.execute("INSERT INTO sample_parts SELECT * FROM w.p")
            except sqlite3.IntegrityError:
                dup = find_duplicate(scratch, set(id_map))
                if dup is None:
                    raise
                key, first, later = dup
                raise DuplicateKeyError(key, names.get(later, str(later)), names.get(first), later) from None
            db.execute("COMMIT")
            db.execute("DETACH DATABASE w")
        db.execute("BEGIN")
        for ddl in INDEX_DDL:
            db.execute(ddl)
        db.execute("COMMIT")
    finally:
        db.close()
