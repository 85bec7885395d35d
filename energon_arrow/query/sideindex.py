"""Find, load (or build) and verify a dataset's Parquet side index.

Order of preference: `.nv-meta/arrow/*.parquet` written by `energon-arrow prepare` (or by an earlier conversion);
otherwise energon's `index.sqlite`, converted once and published next to it (kept in memory when the dataset is not
writable). Verification compares every shard's recorded identity (size, mtime, ETag) with one listing of the store.
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from energon_arrow.adapters import Storage, StorageError
from energon_arrow.index.from_sqlite import (
    META_SOURCE,
    META_UUID,
    SQLITE_REL,
    side_index_from_sqlite,
    write_side_index,
)
from energon_arrow.index.schema import SIDE_INDEX_DIR, SIDE_INDEX_FILES
from energon_arrow.meta.info import info_exists
from energon_arrow.meta.uuid_file import read_index_uuid
from energon_arrow.query.errors import NotPreparedError, StaleIndexError

log = logging.getLogger(__name__)


@dataclass
class SideIndex:
    tables: dict[str, pa.Table]  # shards, samples, parts
    source: str  # "parquet", "index.sqlite (converted, published)", "index.sqlite (converted, in memory)"


def _prepare_hint(storage: Storage) -> str:
    return f"`energon-arrow prepare {storage.url}`"


def _read_parquet(storage: Storage, rel: str) -> pa.Table:
    try:
        if storage.is_local:
            return pq.read_table(storage.local_path(rel), memory_map=True)
        return pq.read_table(io.BytesIO(storage.read_bytes(rel)))
    except StorageError:
        raise
    except (OSError, pa.ArrowException) as exc:
        raise NotPreparedError(
            f"{storage.url_of(rel)}: unreadable side index ({exc}); rebuild it with {_prepare_hint(storage)}"
        ) from None


def _conform(table: pa.Table, name: str, storage: Storage) -> pa.Table:
    schema = SIDE_INDEX_FILES[name]
    missing = [f.name for f in schema if f.name not in table.column_names]
    if missing:
        rel = f"{SIDE_INDEX_DIR}/{name}.parquet"
        raise NotPreparedError(
            f"{storage.url_of(rel)}: side index lacks columns {missing}; rebuild it with {_prepare_hint(storage)}"
        )
    return table.select(schema.names).cast(schema).replace_schema_metadata(table.schema.metadata)


def _read_side_index(storage: Storage) -> dict[str, pa.Table]:
    return {
        name: _conform(_read_parquet(storage, f"{SIDE_INDEX_DIR}/{name}.parquet"), name, storage)
        for name in SIDE_INDEX_FILES
    }


def _convert(storage: Storage, publish: bool) -> SideIndex:
    tables = side_index_from_sqlite(storage)
    if publish:
        try:
            write_side_index(storage, tables)
            return SideIndex(tables, "index.sqlite (converted, published)")
        except StorageError as exc:
            log.warning("%s: cannot publish the side index (%s); using it from memory", storage.url, exc)
    return SideIndex(tables, "index.sqlite (converted, in memory)")


def load_side_index(storage: Storage, publish: bool = True) -> SideIndex:
    """The side-index tables of the dataset at `storage`, converting energon's index.sqlite when needed."""
    if not info_exists(storage):
        raise NotPreparedError(
            f"{storage.url} is not a prepared dataset (no .nv-meta/.info.json): run {_prepare_hint(storage)}"
        )
    has_parquet = storage.exists(f"{SIDE_INDEX_DIR}/shards.parquet")
    if has_parquet:
        tables = _read_side_index(storage)
        meta = tables["shards"].schema.metadata or {}
        recorded = meta.get(META_UUID)
        current = read_index_uuid(storage)
        if recorded is None or current is None or recorded.decode() == current:
            return SideIndex(tables, "parquet")
        if meta.get(META_SOURCE) == b"index.sqlite":
            log.info(
                "%s: index.uuid changed since the side index was converted; converting again", storage.url
            )
            return _convert(storage, publish)
        raise StaleIndexError(
            f"{storage.url}: .nv-meta/index.uuid changed since the Parquet side index was written "
            f"(the dataset was prepared again by another tool); refresh it with {_prepare_hint(storage)}"
        )
    if storage.exists(SQLITE_REL):
        return _convert(storage, publish)
    raise NotPreparedError(
        f"{storage.url} has .nv-meta/.info.json but neither a Parquet side index ({SIDE_INDEX_DIR}/) nor "
        f"index.sqlite: run {_prepare_hint(storage)}"
    )


def verify_shards(storage: Storage, shards: pa.Table, expected: list[str]) -> None:
    """Raise StaleIndexError naming the first shard whose identity differs from what the index recorded."""
    paths = shards.column("path").to_pylist()
    if paths != expected:
        extra = (
            sorted(set(expected) - set(paths)) or sorted(set(paths) - set(expected)) or ["(order changed)"]
        )
        raise StaleIndexError(
            f"{storage.url}: the side index lists different shards than .nv-meta/.info.json (first difference: "
            f"{extra[0]}); refresh it with {_prepare_hint(storage)}"
        )
    listing = {f.path: f for f in storage.scan("**/*.tar")}
    sizes = shards.column("size").to_pylist()
    mtimes = shards.column("mtime").to_pylist()
    etags = shards.column("etag").to_pylist()
    for path, size, mtime, etag in zip(paths, sizes, mtimes, etags):
        now = listing.get(path)
        if now is None:
            raise StaleIndexError(
                f"{storage.url_of(path)}: shard is in the index but missing on storage; "
                f"refresh the index with {_prepare_hint(storage)}"
            )
        what = None
        if now.size != size:
            what = f"size {size} -> {now.size}"
        elif etag and now.etag and etag != now.etag:
            what = f"ETag {etag} -> {now.etag}"
        elif not (etag and now.etag) and mtime is not None and now.mtime is not None and mtime != now.mtime:
            what = f"mtime {mtime} -> {now.mtime}"
        if what:
            raise StaleIndexError(
                f"{storage.url_of(path)}: shard changed since it was indexed ({what}); "
                f"refresh the index with {_prepare_hint(storage)}"
            )
