"""Find, load (or build) and verify a dataset's Parquet side index.

Order of preference: `.nv-meta/arrow/*.parquet` written by `energon-arrow prepare` (or by an earlier conversion);
otherwise energon's `index.sqlite`, converted once and published next to it (kept in memory when the dataset is not
writable). Verification compares every shard's recorded size, mtime and ETag with one listing of the store, and
reads the content fingerprint of shards whose size is unchanged but whose mtime/ETag moved (copies, uploads).
Files listed in the dataset's manifest (`meta.manifest`) are checked: `shards.parquet` and `summary.parquet`
(read whole) by their SHA-256, `samples.parquet` and `parts.parquet` (scanned in place by DuckDB) by their size and,
on object stores, every range read by the chunk CRCs the manifest records (meta.verified_ranges).
"""

from __future__ import annotations

import io
import logging
import os
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from energon_arrow.adapters import Storage, StorageError
from energon_arrow.adapters.retry import reread_attempts
from energon_arrow.index.fingerprint import read_fingerprints
from energon_arrow.index.from_sqlite import (
    META_SOURCE,
    META_UUID,
    SQLITE_REL,
    side_index_from_sqlite,
    write_side_index,
)
from energon_arrow.index.schema import (
    OPTIONAL_COLUMNS,
    SIDE_INDEX_DIR,
    SIDE_INDEX_FILES,
    one_side_index,
    with_optional_columns,
)
from energon_arrow.index.summary import SUMMARY_FILE, SUMMARY_KEY, identity
from energon_arrow.meta.info import info_exists
from energon_arrow.meta.manifest import IntegrityError, check_size, manifest_of, read_verified
from energon_arrow.meta.uuid_file import read_index_uuid
from energon_arrow.query.errors import NotPreparedError, StaleIndexError

log = logging.getLogger(__name__)


@dataclass
class SideIndex:
    tables: dict[str, pa.Table]  # shards (always), samples and parts (only when converted from index.sqlite)
    source: str  # "parquet", "index.sqlite (converted, published)", "index.sqlite (converted, in memory)"
    rows: dict[str, int]  # rows of samples and parts (from the Parquet footers)
    summary: bool = False  # `summary.parquet` describes this side index (index.summary)
    summary_table: pa.Table | None = None  # its rows, when they were read (and checked) whole
    _identity: bytes | None = None

    def identity(self) -> bytes:
        """`index.summary.identity` of this side index (computed once)."""
        if self._identity is None:
            self._identity = identity(self.tables["shards"], self.rows["samples"], self.rows["parts"])
        return self._identity


def _prepare_hint(storage: Storage) -> str:
    return f"`energon-arrow prepare {storage.url}`"


def _listed(storage: Storage, rel: str) -> bool:
    manifest = manifest_of(storage)
    return manifest is not None and manifest.entry(rel) is not None


def read_parquet(storage: Storage, rel: str) -> pa.Table:
    try:
        # ParquetFile, not read_table: read_table imports pyarrow.dataset and pandas (~0.5 s at first open)
        if _listed(storage, rel):  # read whole, checked against the manifest, parsed from the same bytes
            return pq.ParquetFile(pa.BufferReader(read_verified(storage, rel))).read()
        if storage.is_local:
            return pq.ParquetFile(storage.local_path(rel), memory_map=True).read()
        return pq.ParquetFile(io.BytesIO(storage.read_bytes(rel))).read()
    except StorageError:
        raise
    except (OSError, pa.ArrowException) as exc:
        raise NotPreparedError(
            f"{storage.url_of(rel)}: unreadable side index ({exc}); rebuild it with {_prepare_hint(storage)}"
        ) from None


def _missing_columns(schema: pa.Schema, name: str, storage: Storage) -> None:
    optional = OPTIONAL_COLUMNS.get(name, ())
    missing = [
        f.name for f in SIDE_INDEX_FILES[name] if f.name not in schema.names and f.name not in optional
    ]
    if missing:
        rel = f"{SIDE_INDEX_DIR}/{name}.parquet"
        raise NotPreparedError(
            f"{storage.url_of(rel)}: side index lacks columns {missing}; rebuild it with {_prepare_hint(storage)}"
        )


def _footer_once(storage: Storage, rel: str) -> pq.FileMetaData:
    if storage.is_local:
        path = storage.local_path(rel)
        check_size(storage, rel, os.path.getsize(path))
        return pq.read_metadata(path)
    from energon_arrow.meta.verified_ranges import open_ranged  # imports fsspec: only for remote storage

    with open_ranged(storage, rel) as f:
        size = getattr(f, "size", None)  # fsspec's files; multi-storage-client's have none
        check_size(storage, rel, size if isinstance(size, int) else storage.stat(rel).size)
        return pq.read_metadata(f)


def _read_footer(storage: Storage, rel: str) -> pq.FileMetaData:
    """A Parquet file's footer only: schema, row count, key-value metadata (DuckDB reads the data in place). A
    footer that does not parse is read again (a GET damaged on its way: the storage's retry budget) before the
    file counts as unreadable."""
    attempts = reread_attempts(storage)
    while True:
        try:
            return _footer_once(storage, rel)
        except IntegrityError:
            raise
        except FileNotFoundError:
            raise NotPreparedError(
                f"{storage.url_of(rel)}: side index file missing; rebuild it with {_prepare_hint(storage)}"
            ) from None
        except (OSError, pa.ArrowException) as exc:
            if next(attempts, None) is None:
                raise NotPreparedError(
                    f"{storage.url_of(rel)}: unreadable side index ({exc}); rebuild it with "
                    f"{_prepare_hint(storage)}"
                ) from None


def _read_side_index(storage: Storage) -> SideIndex:
    """The shards table (small: read now) after checking that every side-index file has the needed columns, and
    whether the summary describes them: footers only, no sample or part rows read."""
    shards = read_parquet(storage, f"{SIDE_INDEX_DIR}/shards.parquet")
    _missing_columns(shards.schema, "shards", storage)
    rows = {}
    footers = []  # their schemas' metadata
    for name in SIDE_INDEX_FILES:
        if name != "shards":
            footer = _read_footer(storage, f"{SIDE_INDEX_DIR}/{name}.parquet")
            arrow_schema = footer.schema.to_arrow_schema()
            _missing_columns(arrow_schema, name, storage)
            rows[name] = footer.num_rows
            footers.append(arrow_schema.metadata)
    schema = SIDE_INDEX_FILES["shards"]
    metadata = shards.schema.metadata
    if not one_side_index(shards, footers, rows["samples"]):
        raise NotPreparedError(
            f"{storage.url_of(SIDE_INDEX_DIR)}: unreadable side index (its files are of different prepares: a "
            f"publish was cut off); rebuild it with {_prepare_hint(storage)}"
        )
    shards = with_optional_columns(shards, "shards")
    shards = shards.select(schema.names).cast(schema).replace_schema_metadata(metadata)
    side = SideIndex({"shards": shards}, "parquet", rows)
    side.summary = _has_summary(storage, side)
    return side


def _has_summary(storage: Storage, side: SideIndex) -> bool:
    """Whether `.nv-meta/arrow/summary.parquet` exists and describes this side index (an unreadable or stale one
    is ignored: `Dataset.ensure_summary` computes it again)."""
    rel = f"{SIDE_INDEX_DIR}/{SUMMARY_FILE}"
    if _listed(
        storage, rel
    ):  # prepare wrote it: read whole and checked (a mismatch is an error, not a rebuild)
        table = read_parquet(storage, rel)
        if (table.schema.metadata or {}).get(SUMMARY_KEY) != side.identity():
            return False
        side.summary_table = table
        return True
    if not storage.exists(rel):
        return False
    try:
        footer = _read_footer(storage, rel)
    except NotPreparedError as exc:
        log.warning("%s; it is computed again", exc)
        return False
    return (footer.metadata or {}).get(SUMMARY_KEY) == side.identity()


def table_rows(tables: dict[str, pa.Table]) -> dict[str, int]:
    return {name: tables[name].num_rows for name in ("samples", "parts")}


def _convert(storage: Storage, publish: bool) -> SideIndex:
    tables = side_index_from_sqlite(storage)
    if publish:
        try:
            write_side_index(storage, tables)  # with its summary
            return SideIndex(tables, "index.sqlite (converted, published)", table_rows(tables), True)
        except StorageError as exc:
            log.warning("%s: cannot publish the side index (%s); using it from memory", storage.url, exc)
    return SideIndex(tables, "index.sqlite (converted, in memory)", table_rows(tables))


def load_side_index(storage: Storage, publish: bool = False) -> SideIndex:
    """The side-index tables of the dataset at `storage`, converting energon's index.sqlite when needed (in
    memory: reading a dataset never writes to its storage; `publish=True`, for writers, stores the conversion)."""
    if not info_exists(storage):
        missing = storage.missing_root()
        if missing is not None:
            raise NotPreparedError(f"{storage.url}: {missing}; check the path or URL")
        raise NotPreparedError(
            f"{storage.url} is not a prepared dataset (no .nv-meta/.info.json): run {_prepare_hint(storage)}"
        )
    has_parquet = storage.exists(f"{SIDE_INDEX_DIR}/shards.parquet")
    if has_parquet:
        side = _read_side_index(storage)
        meta = side.tables["shards"].schema.metadata or {}
        recorded = meta.get(META_UUID)
        current = read_index_uuid(storage)
        if recorded is None or current is None or recorded.decode() == current:
            return side
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
    """Raise StaleIndexError naming the first shard that changed since it was indexed.

    One listing of the store gives every shard's size, mtime and ETag. A different size is a change. The same
    size with the same ETag (or, without ETags, the same mtime) is unchanged. The same size with another
    mtime/ETag is what a copy or an upload gives: the content fingerprint recorded by prepare decides, read
    for those shards only (`index.fingerprint`: a few small ranged reads each). An index without fingerprints
    (written by an earlier version, or converted from index.sqlite) accepts such a shard when only the mtime
    differs, and logs that its content could not be checked.
    """
    check_shard_paths(storage, shards, expected)
    listing = {f.path: f for f in storage.scan("**/*.tar")}
    warn_unverified(storage, compare_shards(storage, shards, listing))


def check_shard_paths(storage: Storage, shards: pa.Table, expected: list[str]) -> None:
    """Raise StaleIndexError when the shards table lists other shards than .info.json (`expected`)."""
    paths = shards.column("path").to_pylist()
    if paths != expected:
        extra = (
            sorted(set(expected) - set(paths)) or sorted(set(paths) - set(expected)) or ["(order changed)"]
        )
        raise StaleIndexError(
            f"{storage.url}: the side index lists different shards than .nv-meta/.info.json (first difference: "
            f"{extra[0]}); refresh it with {_prepare_hint(storage)}"
        )


def warn_unverified(storage: Storage, unverified: list[str]) -> None:
    if unverified:
        log.warning(
            "%s: %d shard(s) have new modification times but their old size (first: %s) and the side index has "
            "no content fingerprints to check them; `energon-arrow prepare` records them",
            storage.url,
            len(unverified),
            unverified[0],
        )


def compare_shards(storage: Storage, shards: pa.Table, listing: dict) -> list[str]:
    """Compare rows of the shards table with what the store says now (`listing`: path -> FileInfo); raise
    StaleIndexError naming the first shard that changed (see verify_shards). Returns the shards accepted
    unverified (mtime moved, no fingerprint recorded)."""
    rows = zip(
        *(shards.column(c).to_pylist() for c in ("path", "size", "mtime", "etag", "data_end", "fingerprint"))
    )
    to_fingerprint: list[tuple[str, int, int, str]] = []
    unverified: list[str] = []
    for path, size, mtime, etag, data_end, fingerprint in rows:
        now = listing.get(path)
        if now is None:
            raise_missing(storage, path)
        if now.size != size:
            _raise_changed(storage, path, f"size {size} -> {now.size}")
        moved = _moved(mtime, etag, now)
        if moved is None:
            continue
        if fingerprint is not None:
            to_fingerprint.append((path, size, data_end, fingerprint))
        elif moved.startswith("mtime"):
            unverified.append(path)
        else:
            _raise_changed(storage, path, moved)
    _check_fingerprints(storage, to_fingerprint)
    return unverified


def raise_missing(storage: Storage, path: str):
    raise StaleIndexError(
        f"{storage.url_of(path)}: shard is in the index but missing on storage; "
        f"refresh the index with {_prepare_hint(storage)}"
    )


def _moved(mtime, etag, now) -> str | None:
    """How a shard of unchanged size differs from its recorded mtime/ETag ("ETag ..." or "mtime ..."), None if
    it does not: ETags are compared when both sides have one, else mtimes when both have one."""
    if etag and now.etag:
        return None if etag == now.etag else f"ETag {etag} -> {now.etag}"
    if mtime is None or now.mtime is None or mtime == now.mtime:
        return None
    return f"mtime {mtime} -> {now.mtime}"


def _check_fingerprints(storage: Storage, shards: list[tuple[str, int, int, str]]) -> None:
    if not shards:
        return
    current = read_fingerprints(storage, [(path, size, data_end) for path, size, data_end, _ in shards])
    for (path, _, _, recorded), now in zip(shards, current):
        if now != recorded:
            _raise_changed(storage, path, "same size, different content fingerprint")
    log.info(
        "%s: %d shard(s) have new modification times or ETags but unchanged content (copied or uploaded)",
        storage.url,
        len(shards),
    )


def _raise_changed(storage: Storage, path: str, what: str):
    raise StaleIndexError(
        f"{storage.url_of(path)}: shard changed since it was indexed ({what}); "
        f"refresh the index with {_prepare_hint(storage)}"
    )
