"""`open_dataset`: a prepared dataset as SQL views, polars frames and split tables."""

from __future__ import annotations

import logging
import threading
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from energon_arrow.adapters import Storage, StorageError, open_storage
from energon_arrow.index.schema import SIDE_INDEX_DIR, SIDE_INDEX_FILES
from energon_arrow.index.side_index import has_energon_index
from energon_arrow.meta.info import info_exists, read_info
from energon_arrow.meta.split import read_split
from energon_arrow.query import catalog, exclusions
from energon_arrow.query.errors import QueryError
from energon_arrow.query.guard import check_read_only, explain_error
from energon_arrow.query.limits import QueryLimits
from energon_arrow.query.polylithic import AuxSource, folder_files, resolve_references
from energon_arrow.query.result import QueryResult
from energon_arrow.query.sideindex import load_side_index, verify_shards
from energon_arrow.query.splits import split_tables

log = logging.getLogger(__name__)

SPLIT_COLUMNS = ["shard_id", "shard_path", "sample_index", "sample_key", "byte_offset", "byte_size"]


def in_split_order(table: pa.Table) -> pa.Table:
    """`table` sorted by (shard_position, sample_index). DuckDB's join emits ordered runs (its output chunks), in
    order or, with several threads, interleaved: a stable argsort of one int64 key (timsort: fast on a few
    runs) finds the order, which is applied as zero-copy slices of the table when it is a few pieces of it, else
    by a take."""
    pos = table.column("shard_position").to_numpy().astype(np.int64)
    idx = table.column("sample_index").to_numpy()
    dp, di = np.diff(pos), np.diff(idx)
    if ((dp > 0) | ((dp == 0) & (di > 0))).all():
        return table
    if idx.min() >= 0 and idx.max() < 1 << 32:
        perm = np.argsort((pos << 32) | idx, kind="stable")
    else:
        perm = np.lexsort((idx, pos))
    starts = np.r_[0, np.flatnonzero(np.diff(perm) != 1) + 1]
    if len(starts) > len(perm) // 1024:
        return table.take(perm)
    sizes = np.diff(np.r_[starts, len(perm)])
    return pa.concat_tables([table.slice(perm[a], n) for a, n in zip(starts.tolist(), sizes.tolist())])


class Dataset:
    """A prepared dataset (ours or energon's) opened for queries. Build it with `open_dataset`.

    Views: samples, parts, shards (the side index), sample_parts, part_types, splits, excluded, split_samples.
    """

    def __init__(
        self,
        storage: Storage,
        *,
        verify: bool = True,
        split_config: str = "split.yaml",
        publish: bool = False,
        limits: QueryLimits | None = None,
    ):
        self.storage = storage
        self.info = read_info(storage)
        side = load_side_index(storage, publish=publish)
        self.index_source = side.source
        # False: prepared with --no-energon-index (no index.sqlite)
        self.energon_index = has_energon_index(side.tables["shards"].schema)
        if verify:
            verify_shards(storage, side.tables["shards"], list(self.info.shard_counts))
        self.split_config_name = split_config
        self.split_config = read_split(storage, split_config)
        splits, excludes = split_tables(
            self.split_config, list(self.info.shard_counts), storage.url_of(f".nv-meta/{split_config}")
        )
        in_place = side.source in ("parquet", "index.sqlite (converted, published)")
        base = {name: (None if in_place else side.tables[name]) for name in SIDE_INDEX_FILES}
        self._lock = threading.Lock()
        self._base = base
        self._side = side
        self._in_place = in_place
        self._publish = publish and in_place
        self._excludes = excludes
        self._resolved: pa.Table | None = None  # `exclusions()`, once resolved
        self._resolve_lock = threading.Lock()
        # a summary read (and checked) whole is queried from memory, not read again
        self._fs = catalog.reading_fs(storage) if in_place else None
        self._con = catalog.connect(
            storage,
            base,
            splits,
            excludes,
            limits,
            summary=side.summary and side.summary_table is None,
            fs=self._fs,
        )
        if side.summary_table is not None:
            catalog.use_summary(self._con, side.summary_table)
        self._columns: dict[str, list[str]] | None = None

    # ---- introspection ------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return self.storage.url

    @property
    def views(self) -> dict[str, list[str]]:
        """Every queryable view and its columns."""
        if self._columns is None:
            with self._lock:
                self._columns = catalog.view_columns(self._con)
        return self._columns

    @property
    def split_names(self) -> list[str]:
        return list(self.split_config.split_parts)

    def __repr__(self) -> str:
        return (
            f"Dataset({self.url!r}, shards={len(self.info.shard_counts)}, samples={self.info.total_samples})"
        )

    # ---- SQL ----------------------------------------------------------------------------------------------
    def sql(self, query: str, params: Any = None, tables: dict[str, Any] | None = None) -> QueryResult:
        """Run read-only DuckDB SQL over the dataset's views. `params` binds `?`/`$name` placeholders; `tables`
        adds Arrow tables / polars or pandas frames as extra views for this query only."""
        taken = sorted(set(tables or {}) & set(catalog.PUBLIC_VIEWS))
        if taken:
            raise QueryError(f"extra tables may not shadow the dataset's views: {', '.join(taken)}")
        if catalog.uses_exclusions(query):
            self.exclusions()
        with self._lock:
            check_read_only(self._con, query)
        try:
            return QueryResult(self._internal(query, params, tables), query)
        except duckdb.Error as exc:
            with self._lock:
                self._columns = self._columns or catalog.view_columns(self._con)
            raise explain_error(exc, query, self._columns) from None

    def _internal(self, query: str, params: Any = None, tables: dict[str, Any] | None = None) -> pa.Table:
        """Run `query` (trusted SQL) with `tables` registered as extra views for this query only."""
        with self._lock:
            con = self._con
            if self._fs is not None:
                self._fs.take_failure()  # one another reader recovered from is not this query's
            try:
                for name, value in (tables or {}).items():
                    con.register(name, value)
                return con.sql(query, params=params).to_arrow_table()
            except duckdb.Error:
                failure = self._fs.take_failure() if self._fs is not None else None
                if failure is not None:  # a read of the side index failed: that error, not DuckDB's traceback
                    raise failure from None
                raise
            finally:
                for name in tables or {}:
                    con.unregister(name)

    def exclusions(self) -> pa.Table:
        """The expanded `exclude` entries (the `excluded` view's rows: entry, kind, shard_id, path, sample_key) with
        the sample_index each `<shard>/<key>` entry matches (null: none). Resolved once per open dataset, from
        the cache beside the side index when it is current, else by one join of the entries with the sample
        keys, cached for the next open (query.exclusions). The views excluded, split_samples and split_sizes, and
        split(), info and joins, apply it."""
        with self._resolve_lock:
            if self._resolved is None:
                resolved = exclusions.with_indexes(self._excludes, self._match_entries())
                counts = self._side.tables["shards"].column("sample_count").to_numpy()
                with self._lock:
                    catalog.use_exclusions(self._con, resolved, exclusions.bitmaps(resolved, counts))
                self._resolved = resolved
            return self._resolved

    def _match_entries(self) -> pa.Array | None:
        entries = exclusions.sample_entries(self._excludes)
        if not entries.num_rows:
            return None
        side = exclusions.cache_key(self.storage, self._side.identity())
        rel = exclusions.cache_rel(self.split_config_name)
        indexes = exclusions.read_cache(self.storage, rel, entries, side) if self._in_place else None
        if indexes is None:
            indexes = exclusions.match(entries, self._internal)
            if self._publish:
                exclusions.write_cache(self.storage, rel, entries, indexes, side)
        return indexes

    def ensure_summary(self) -> None:
        """Make `part_types` (and `info`) answer from the side index's summary (`index.summary`): a dataset
        prepared by an earlier version has none, so it is computed once, in one streaming pass over the parts,
        and kept in memory (published beside the side index only for a dataset opened with `publish=True`)."""
        if self._side.summary:
            return
        from energon_arrow.index.from_sqlite import parquet_bytes
        from energon_arrow.index.summary import SUMMARY_FILE, summarize_batches, with_identity

        columns = ["shard_id", "sample_index", "part_name", "content_size"]
        summary = summarize_batches(self.batches("parts", columns))
        if self._publish:
            rows = self._side.rows
            content = with_identity(summary, self._side.tables["shards"], rows["samples"], rows["parts"])
            try:
                self.storage.publish_folder(SIDE_INDEX_DIR, {SUMMARY_FILE: parquet_bytes(content)})
            except (StorageError, OSError) as exc:
                log.warning("%s: cannot cache the side index summary (%s)", self.url, exc)
        with self._lock:
            catalog.use_summary(self._con, summary)
            self._side.summary = True

    # ---- frames -------------------------------------------------------------------------------------------
    def _frame(self, name: str):
        """A LazyFrame scanning the side-index file in place (or the in-memory table of a converted index)."""
        import polars as pl

        table = self._base[name]
        if table is not None:
            return pl.from_arrow(table).lazy()
        rel = f"{SIDE_INDEX_DIR}/{name}.parquet"
        if self.storage.is_local:
            return pl.scan_parquet(self.storage.local_path(rel))
        return pl.scan_pyarrow_dataset(catalog.parquet_dataset(self.storage, rel))

    def batches(self, name: str, columns: list[str], batch_size: int = 1 << 20):
        """Record batches of side-index table `name` (`columns` only), streamed from the file in place (or from
        the in-memory table of a converted index): memory for one batch."""
        table = self._base[name]
        if table is not None:
            yield from table.select(columns).to_batches(max_chunksize=batch_size)
            return
        import pyarrow.parquet as pq

        rel = f"{SIDE_INDEX_DIR}/{name}.parquet"
        if self.storage.is_local:
            source = self.storage.local_path(rel)
        else:
            from energon_arrow.meta.verified_ranges import open_ranged

            source = open_ranged(self.storage, rel)
        with pq.ParquetFile(source) as f:
            yield from f.iter_batches(batch_size=batch_size, columns=columns)

    @property
    def samples(self):
        """The samples view as a polars LazyFrame."""
        return self._frame("samples")

    @property
    def parts(self):
        """The parts view as a polars LazyFrame."""
        return self._frame("parts")

    @property
    def shards(self):
        """The shards view as a polars LazyFrame."""
        return self._frame("shards")

    # ---- splits -------------------------------------------------------------------------------------------
    def _check_split(self, name: str) -> None:
        if name not in self.split_config.split_parts:
            raise QueryError(
                f"{self.storage.url_of('.nv-meta/' + self.split_config_name)}: no split {name!r} "
                f"(splits: {', '.join(self.split_names) or 'none'})"
            )

    def split(self, name: str) -> pa.Table:
        """The effective samples of split `name` in energon's iteration order: the split's shards in split.yaml
        order minus excluded shards, each shard's samples by sample_index minus excluded samples.

        Columns: shard_id int32, shard_path string, sample_index int64, sample_key string, byte_offset int64,
        byte_size int64 (byte range of the whole sample in its tar, headers included)."""
        self._check_split(name)
        self.exclusions()
        table = self._internal(
            f"SELECT shard_position, {', '.join(SPLIT_COLUMNS)} FROM split_samples WHERE split = ?", [name]
        )
        return in_split_order(table).drop_columns(["shard_position"])

    def split_parts(self, name: str) -> pa.Table:
        """The parts of `split(name)`'s samples, in the same order (then by content offset): shard_id,
        shard_path, sample_index, sample_key, part_name, content_offset, content_size."""
        self._check_split(name)
        self.exclusions()
        return self._internal(
            """SELECT p.shard_id, s.shard_path, p.sample_index, s.sample_key, p.part_name::VARCHAR AS part_name,
                      p.content_offset, p.content_size
               FROM split_samples s JOIN parts p USING (shard_id, sample_index)
               WHERE s.split = ? ORDER BY s.shard_position, p.sample_index, p.content_offset""",
            [name],
        )

    # ---- part contents and auxiliary data -----------------------------------------------------------------
    def read_parts(self, part_name: str, where: str | None = None) -> pa.Table:
        """The payload of part `part_name` of every sample (optionally filtered by a SQL condition over the
        `sample_parts` view): shard_id, sample_index, sample_key, content (binary). Ranges are fetched with
        coalesced, concurrent reads; use it to pull references out of small json/txt parts."""
        locs = self._internal(
            "SELECT shard_id, shard_path, sample_index, sample_key, content_offset, content_size FROM sample_parts "
            f"WHERE part_name = ? {'AND (' + where + ')' if where else ''} ORDER BY shard_id, content_offset",
            [part_name],
        )
        data = (
            self.storage.read_ranges(
                locs.column("shard_path").to_pylist(),
                locs.column("content_offset").to_numpy(),
                locs.column("content_size").to_numpy(),
            )
            if locs.num_rows
            else []
        )
        content = pa.array([bytes(d) for d in data], type=pa.binary())
        return locs.select(["shard_id", "sample_index", "sample_key"]).append_column("content", content)

    def join_aux(self, aux, refs=None, *, ref_column: str = "ref", storage_options: dict | None = None):
        """Resolve media references against auxiliary sources (energon's `aux:`), all in one query.

        `aux`: {name: prepared dataset URL | plain folder URL | Dataset} (or one of those, named "aux").
        `refs`: None (each sample's key), a SQL query over this dataset's views, or an Arrow table / polars or
        pandas frame; it needs a `ref_column` column and, with several sources, an `aux` column naming one.
        Returns an AuxResolution: `.table` (refs + aux, aux_url, file, byte_offset, byte_size, kind, found),
        `.dangling`, `.summary()`, `.report()`, `.raise_if_dangling()`."""
        sources = aux if isinstance(aux, dict) else {"aux": aux}
        opened = {name: _open_aux(name, src, storage_options) for name, src in sources.items()}
        if refs is None:
            table = self._internal(
                f'SELECT shard_id, sample_index, sample_key, sample_key AS "{ref_column}" FROM samples '
                "ORDER BY shard_id, sample_index"
            )
        elif isinstance(refs, str):
            table = self.sql(refs).arrow()
        else:
            table = pa.table(refs)
        return resolve_references(table, opened, ref_column)

    def close(self) -> None:
        with self._lock:
            self._con.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def open_dataset(
    path_or_url: str | Storage,
    storage_options: dict | None = None,
    *,
    verify: bool = True,
    split_config: str = "split.yaml",
    publish: bool = False,
    limits: QueryLimits | None = None,
) -> Dataset:
    """Open a prepared dataset (local folder or `s3://bucket/prefix`) for SQL queries and split resolution.

    A dataset prepared by energon without our Parquet side index is converted from its index.sqlite when opened,
    in memory (published under `.nv-meta/arrow/` only with `publish=True` and a writable store: opening, querying
    and `info` never write to the dataset's storage otherwise; the summary of an older side index and resolved
    sample exclusions are then kept in memory too). `verify` compares every
    shard's size/mtime/ETag with the store and raises StaleIndexError naming a changed shard. `limits`: DuckDB's
    memory limit, spill folder and threads (bounded defaults, see `energon_arrow.query.limits`).
    """
    return Dataset(
        open_storage(path_or_url, storage_options),
        verify=verify,
        split_config=split_config,
        publish=publish,
        limits=limits,
    )


def _open_aux(name: str, source, storage_options: dict | None) -> AuxSource:
    """An auxiliary source from a Dataset, a prepared dataset's URL, or a plain folder's URL."""
    if isinstance(source, Dataset):
        return AuxSource(name, source.url, source, None)
    storage = open_storage(source, storage_options)
    if info_exists(storage):
        return AuxSource(name, storage.url, open_dataset(storage), None)
    return AuxSource(name, storage.url, None, folder_files(storage))
