"""Build the Parquet side index (`.nv-meta/arrow/`) of a dataset prepared by energon from its index.sqlite.

energon 7.4.1 writes `.info.json` (shard order = tar_file_id), `index.sqlite` (samples, sample_parts) and
`<shard>.tar.idx`. This module reads index.sqlite with sqlite3 in large batches straight into Arrow columns (DuckDB
cannot read SQLite here), checks it against `.info.json`, and writes the three side-index tables with the schemas of
`energon_arrow.index.schema`. The shard identity recorded is the tar's size/mtime/ETag at conversion time; the
`index.uuid` the tables were derived from is kept in the Parquet metadata so a later `energon prepare` is noticed.
"""

from __future__ import annotations

import io
import os
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from energon_arrow.adapters import NotFound, Storage
from energon_arrow.index.schema import (
    PARTS_SCHEMA,
    SAMPLES_SCHEMA,
    SET_KEY,
    SHARDS_SCHEMA,
    SIDE_INDEX_DIR,
    SIDE_INDEX_VERSION,
    parquet_options,
    set_id,
    with_optional_columns,
)
from energon_arrow.index.summary import SUMMARY_FILE, summarize, with_identity
from energon_arrow.meta.info import read_info
from energon_arrow.meta.uuid_file import read_index_uuid

SQLITE_REL = ".nv-meta/index.sqlite"
BATCH_ROWS = 1 << 20

# Parquet key-value metadata written on every side-index table.
META_SOURCE = b"energon_arrow.source"
META_UUID = b"energon_arrow.index_uuid"
META_VERSION = b"energon_arrow.side_index_version"


class SqliteIndexError(ValueError):
    """index.sqlite is missing, unreadable or disagrees with .info.json."""


@contextmanager
def _local_sqlite(storage: Storage) -> Iterator[str]:
    """A local path of index.sqlite: the file itself, or a temporary download for remote stores."""
    if storage.is_local:
        path = storage.local_path(SQLITE_REL)
        if not os.path.isfile(path):
            raise NotFound(storage.url_of(SQLITE_REL), "file not found")
        yield path
        return
    data = storage.read_bytes(SQLITE_REL)
    with tempfile.TemporaryDirectory(prefix="ea-sqlite-") as tmp:
        path = os.path.join(tmp, "index.sqlite")
        with open(path, "wb") as f:
            f.write(data)
        del data
        yield path


def _connect(path: str) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)


def _fetch_columns(conn: sqlite3.Connection, sql: str, types: list[pa.DataType]) -> list[pa.ChunkedArray]:
    """Run `sql` and collect its columns as Arrow arrays, `BATCH_ROWS` rows at a time (bounded Python objects)."""
    cur = conn.execute(sql)
    chunks: list[list[pa.Array]] = [[] for _ in types]
    while True:
        rows = cur.fetchmany(BATCH_ROWS)
        if not rows:
            break
        for i, column in enumerate(zip(*rows)):
            chunks[i].append(pa.array(column, type=types[i]))
    return [pa.chunked_array(c, type=t) for c, t in zip(chunks, types)]


def read_sqlite_tables(sqlite_path: str, url: str) -> tuple[pa.Table, pa.Table]:
    """(samples, parts) Arrow tables from an energon index.sqlite, in side-index row order."""
    try:
        conn = _connect(sqlite_path)
        try:
            samples_cols = _fetch_columns(
                conn,
                "SELECT tar_file_id, sample_index, sample_key, byte_offset, byte_size FROM samples "
                "ORDER BY tar_file_id, sample_index",
                [pa.int32(), pa.int64(), pa.string(), pa.int64(), pa.int64()],
            )
            parts_cols = _fetch_columns(
                conn,
                "SELECT tar_file_id, sample_index, part_name, content_byte_offset, content_byte_size "
                "FROM sample_parts ORDER BY tar_file_id, sample_index, content_byte_offset",
                [pa.int32(), pa.int64(), pa.string(), pa.int64(), pa.int64()],
            )
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise SqliteIndexError(f"{url}: cannot read energon's index ({exc})") from None
    except UnicodeDecodeError as exc:  # sqlite3 decodes TEXT as UTF-8
        raise SqliteIndexError(
            f"{url}: a sample key or part name is not valid UTF-8 ({exc.reason})"
        ) from None
    except (pa.ArrowException, OverflowError) as exc:  # SQLite columns are untyped: text or a float in an int
        raise SqliteIndexError(
            f"{url}: a value of the wrong type or range in energon's index ({exc})"
        ) from None
    samples = pa.Table.from_arrays(samples_cols, schema=SAMPLES_SCHEMA)
    parts_cols[2] = pc.dictionary_encode(parts_cols[2]).cast(PARTS_SCHEMA.field("part_name").type)
    parts_cols.append(pa.nulls(len(parts_cols[0]), pa.uint32()))  # energon records no checksums
    parts = pa.Table.from_arrays(parts_cols, schema=PARTS_SCHEMA)
    return samples, parts


def _check_counts(samples: pa.Table, shard_names: list[str], counts: list[int], url: str) -> None:
    ids = samples.column("shard_id").to_numpy()
    if len(ids) and (ids.min() < 0 or ids.max() >= len(shard_names)):
        bad = int(ids.max() if ids.max() >= len(shard_names) else ids.min())
        raise SqliteIndexError(
            f"{url}: index.sqlite names tar_file_id {bad} but .info.json lists {len(shard_names)} shards; "
            "the index is out of date: re-run `energon prepare` or `energon-arrow prepare`"
        )
    found = np.bincount(ids, minlength=len(shard_names)) if len(ids) else np.zeros(len(shard_names), np.int64)
    for sid in np.flatnonzero(found != np.asarray(counts, dtype=np.int64)):
        raise SqliteIndexError(
            f"{url}: shard {shard_names[sid]} has {int(found[sid])} samples in index.sqlite but {counts[sid]} in "
            ".info.json; the index is out of date: re-run `energon prepare` or `energon-arrow prepare`"
        )


def _shards_table(storage: Storage, samples: pa.Table, shard_names: list[str], counts: list[int]) -> pa.Table:
    listing = {f.path: f for f in storage.scan("**/*.tar")}
    missing = [name for name in shard_names if name not in listing]
    if missing:
        raise SqliteIndexError(
            f"{storage.url}: shard {missing[0]} is listed in .info.json but does not exist"
            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
        )
    n = len(shard_names)
    ends = np.zeros(n, dtype=np.int64)
    if samples.num_rows:
        ids = samples.column("shard_id").to_numpy()
        stop = samples.column("byte_offset").to_numpy() + samples.column("byte_size").to_numpy()
        np.maximum.at(ends, ids, stop)
    infos = [listing[name] for name in shard_names]
    return pa.Table.from_pydict(
        {
            "shard_id": np.arange(n, dtype=np.int32),
            "path": shard_names,
            "sample_count": np.asarray(counts, dtype=np.int64),
            "size": np.asarray([f.size for f in infos], dtype=np.int64),
            "mtime": [f.mtime for f in infos],
            "etag": [f.etag for f in infos],
            "data_end": ends,
            "fingerprint": pa.nulls(n, pa.string()),  # not computed: converting reads no shard bytes
        },
        schema=SHARDS_SCHEMA,
    )


def side_index_from_sqlite(storage: Storage) -> dict[str, pa.Table]:
    """The side-index tables {shards, samples, parts} of an energon-prepared dataset, built from index.sqlite."""
    info = read_info(storage)
    shard_names = list(info.shard_counts)
    counts = [int(c) for c in info.shard_counts.values()]
    with _local_sqlite(storage) as path:
        samples, parts = read_sqlite_tables(path, storage.url_of(SQLITE_REL))
    _check_counts(samples, shard_names, counts, storage.url)
    shards = _shards_table(storage, samples, shard_names, counts)
    metadata = {
        META_SOURCE: b"index.sqlite",
        META_VERSION: str(SIDE_INDEX_VERSION).encode(),
        SET_KEY: set_id(*(shards.column(c).to_pylist() for c in ("path", "size", "mtime", "etag"))),
    }
    uuid = read_index_uuid(storage)
    if uuid:
        metadata[META_UUID] = uuid.encode()
    return {
        name: table.replace_schema_metadata(metadata)
        for name, table in (("shards", shards), ("samples", samples), ("parts", parts))
    }


def parquet_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=1 << 20, **parquet_options(table.schema))
    return buf.getvalue()


def write_side_index(storage: Storage, tables: dict[str, pa.Table]) -> None:
    """Publish the tables as `.nv-meta/arrow/{name}.parquet` together with their summary (index.summary)
    (readers never see a mix)."""
    shards = with_optional_columns(tables["shards"], "shards")
    summary = with_identity(summarize(tables["parts"]), shards, len(tables["samples"]), len(tables["parts"]))
    files = {SUMMARY_FILE: parquet_bytes(summary)}  # first: object stores write the mapping's last file last
    files.update({f"{name}.parquet": parquet_bytes(t) for name, t in tables.items()})
    storage.publish_folder(SIDE_INDEX_DIR, files)
