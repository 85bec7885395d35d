"""index.sqlite's media tables, exactly as energon 7.4.1 lays them out: `media_metadata(entry_key, metadata_type,
metadata_json)` (one row per media file: `<sample key>.<part>` in a WebDataset, the path relative to the folder in
a filesystem dataset) and `media_filters(strategy, patterns)` (how the files were chosen).

`MediaRows(path)` writes them: rows arrive as columns (one batched multi-row INSERT OR REPLACE per call, energon's
replace semantics); `carry_over` copies rows of an earlier index; `copy_into(index_path)` adds the tables to a
finished index.sqlite (prepare builds them beside its page-written file). `MediaLookup` reads them (the stores'
`get_media_metadata`): one read-only connection per process and thread, opened on first use.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading

from energon_arrow.index.sqlite_writer import insert_columns

METADATA_DDL = """
                CREATE TABLE IF NOT EXISTS media_metadata (
                    entry_key TEXT PRIMARY KEY,
                    metadata_type TEXT NOT NULL,
                    metadata_json TEXT NOT NULL
                )
                """
FILTERS_DDL = """
                CREATE TABLE IF NOT EXISTS media_filters (
                    filter_id INTEGER PRIMARY KEY AUTOINCREMENT,
                    strategy TEXT NOT NULL,
                    patterns TEXT,
                    created_at_utc TEXT DEFAULT CURRENT_TIMESTAMP,
                    UNIQUE(strategy, patterns)
                )
                """
_HAS_TABLE = "SELECT 1 FROM sqlite_master WHERE type='table' AND name='media_metadata'"


def has_media_tables(path: str) -> bool:
    """Whether the SQLite file at `path` holds energon's two media tables (False when it is not there)."""
    if not os.path.isfile(path):
        return False
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        sql = "SELECT count(*) FROM sqlite_master WHERE type='table' AND name IN ('media_metadata', 'media_filters')"
        return db.execute(sql).fetchone()[0] == 2


def read_filters(path: str) -> set[tuple[str, str | None]]:
    """The (strategy, patterns) rows of `media_filters` in the SQLite file at `path`."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return set(db.execute("SELECT strategy, patterns FROM media_filters").fetchall())


class MediaRows:
    """The media tables in the SQLite file at `path` (created when missing; existing rows are kept, like energon's
    `reset_tables=False`)."""

    def __init__(self, path: str):
        self.path = path
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA synchronous = OFF")
        self.db.execute("PRAGMA journal_mode = MEMORY")
        self.db.execute("BEGIN")
        self.db.execute(METADATA_DDL)
        self.db.execute(FILTERS_DDL)
        self.db.execute("COMMIT")
        self.written = 0

    def add(self, keys: list[str], types: list[str], jsons: list[str]) -> None:
        if keys:
            self.db.execute("BEGIN")
            insert_columns(self.db, "media_metadata", [keys, types, jsons], verb="INSERT OR REPLACE")
            self.db.execute("COMMIT")
            self.written += len(keys)

    def add_filter(self, strategy: str, patterns: str | None) -> None:
        self.db.execute(
            "INSERT OR IGNORE INTO media_filters (strategy, patterns) VALUES (?, ?)", (strategy, patterns)
        )

    def carry_over(self, old_path: str, keys: list[str] | None) -> int:
        """Copy the rows of `keys` (all when None) and the filters of the media tables in `old_path`. Returns the
        number of rows copied."""
        db = self.db
        db.execute("ATTACH ? AS old", (f"file:{old_path}?mode=ro",))
        try:
            db.execute("BEGIN")
            if keys is None:
                cur = db.execute("INSERT OR REPLACE INTO media_metadata SELECT * FROM old.media_metadata")
            else:
                db.execute(
                    "CREATE TEMP TABLE IF NOT EXISTS wanted (entry_key TEXT PRIMARY KEY) WITHOUT ROWID"
                )
                db.execute("DELETE FROM wanted")
                insert_columns(db, "temp.wanted", [keys], verb="INSERT OR IGNORE")
                cur = db.execute(
                    "INSERT OR REPLACE INTO media_metadata SELECT o.* FROM old.media_metadata o "
                    "JOIN temp.wanted USING (entry_key)"
                )
            copied = cur.rowcount
            db.execute(
                "INSERT OR IGNORE INTO media_filters (strategy, patterns, created_at_utc) "
                "SELECT strategy, patterns, created_at_utc FROM old.media_filters"
            )
            db.execute("COMMIT")
        finally:
            db.execute("DETACH old")
        self.written += copied
        return copied

    def copy_into(self, index_path: str) -> None:
        """Add the tables with every row to the SQLite file `index_path` (which has none yet), and close."""
        self.db.close()
        with contextlib.closing(sqlite3.connect(index_path, isolation_level=None)) as db:
            db.execute("ATTACH ? AS m", (self.path,))
            db.execute("BEGIN")
            db.execute(METADATA_DDL)
            db.execute(FILTERS_DDL)
            db.execute("INSERT INTO main.media_metadata SELECT * FROM m.media_metadata ORDER BY entry_key")
            db.execute("INSERT INTO main.media_filters SELECT * FROM m.media_filters ORDER BY filter_id")
            db.execute("COMMIT")
            db.execute("DETACH m")

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self.db.close()


class MediaLookup:
    """`get(key) -> (metadata_type, metadata_json) | None` from the media table of the index.sqlite at `path`
    (read-only, immutable: the file is replaced, never changed in place). Picklable; each process and thread
    opens its own connection."""

    def __init__(self, path: str):
        self.path = path
        self._local = threading.local()
        self._pid = os.getpid()

    def __getstate__(self) -> dict:
        return {"path": self.path}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"])

    def _db(self) -> sqlite3.Connection:
        if self._pid != os.getpid():  # forked: the parent's connections are not ours
            self._local, self._pid = threading.local(), os.getpid()
        db = getattr(self._local, "db", None)
        if db is None:
            db = self._local.db = sqlite3.connect(f"file:{self.path}?mode=ro&immutable=1", uri=True)
        return db

    def has_table(self) -> bool:
        return self._db().execute(_HAS_TABLE).fetchone() is not None

    def get(self, key: str) -> tuple[str, str] | None:
        return (
            self._db()
            .execute("SELECT metadata_type, metadata_json FROM media_metadata WHERE entry_key = ?", (key,))
            .fetchone()
        )


PREPARE_HINT = (
    "Run `energon-arrow prepare --media-metadata-by-...` (a WebDataset) or `energon-arrow prepare-media "
    "--media-metadata-by-...` (a folder) to generate it."
)


def open_media_lookup(storage, rel: str = ".nv-meta/index.sqlite") -> MediaLookup:
    """The `MediaLookup` of the dataset at `storage` (its index.sqlite streamed once per process from object stores
    into a private temporary folder, checked against the manifest, removed with the lookup); RuntimeError naming the dataset when it has no media
    metadata."""
    from energon_arrow.adapters import NotFound

    missing = f"Media metadata database missing at {storage.url_of(rel)}. {PREPARE_HINT}"
    if storage.is_local:
        path = storage.local_path(rel)
        if not os.path.isfile(path):
            raise RuntimeError(missing)
        lookup = MediaLookup(path)
    else:
        import shutil
        import weakref

        from energon_arrow.adapters.publish import private_mkdtemp
        from energon_arrow.meta.manifest import download_verified

        tmp = private_mkdtemp("ea-media-")
        path = os.path.join(tmp, "index.sqlite")
        try:  # an index.sqlite can be GBs: streamed, checked against the manifest
            download_verified(storage, rel, path)
        except NotFound:
            shutil.rmtree(tmp, ignore_errors=True)
            raise RuntimeError(missing) from None
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        lookup = MediaLookup(path)
        weakref.finalize(lookup, shutil.rmtree, tmp, True)
    if not lookup.has_table():
        raise RuntimeError(f"Media metadata is not available for the dataset {storage.url}. {PREPARE_HINT}")
    return lookup
