"""Parquet side indexes under `.nv-meta/arrow/` (schemas in `energon_arrow.index.schema`, docs/format.md).

- `SideIndexWriter(folder, shards)`: streaming writers for `shards.parquet`, `samples.parquet`, `parts.parquet`
  and their summary `summary.parquet` (`index.summary`, computed from each flushed group of whole shards), every
  file marked with the set id of `shards` (schema.SET_KEY: readers do not take files of two prepares as one);
  `.add_shard(shard_id, path, size, mtime, etag, index)` appends one shard (rows stay in shard_id order when shards are
  added in that order), `.close() -> {relative name: local path}` for `Storage.publish_folder`; after `close`,
  `.tables` holds the samples and parts tables when they were written as one group (else {}), so that the
  loader's row index is built without reading them back.
- `read_side_index(storage) -> SideIndex | None`: the previous side index of a dataset (None when absent or torn, or
  when some part has no CRC32C: written before checksums, or converted from index.sqlite), with
  `.shard_rows(path)` giving back an indexed shard's rows (for incremental prepare).
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from energon_arrow.adapters import NotFound
from energon_arrow.index.schema import (
    PARTS_SCHEMA,
    SAMPLES_SCHEMA,
    SET_KEY,
    SHARDS_SCHEMA,
    SIDE_INDEX_DIR,
    one_side_index,
    parquet_options,
    set_id,
    with_optional_columns,
)
from energon_arrow.index.summary import SUMMARY_FILE, SUMMARY_SCHEMA, summarize, with_identity
from energon_arrow.tar.arrow import from_bytes_list, from_numpy, ints_to_numpy
from energon_arrow.tar.samples import ShardIndex

_ROW_GROUP_ROWS = 1 << 20
_COMPACT = 256
SIDE_INDEX_NAMES = {name: f"arrow/{name}.parquet" for name in ("shards", "samples", "parts")}
SUMMARY_NAME = f"arrow/{SUMMARY_FILE}"  # written with them; not needed to reuse an index (index.summary)


def _table(schema: pa.Schema, columns: list) -> pa.Table:
    return pa.Table.from_arrays(columns, schema=schema)


def _crc_column(crcs: np.ndarray | None, m: int) -> pa.Array:
    """The parts' `content_crc32c` column: the checksums, or nulls where none were recorded."""
    if crcs is None:
        return pa.nulls(m, pa.uint32())
    return from_numpy(np.asarray(crcs, np.uint32), np.uint32)


ENERGON_INDEX_KEY = b"energon_arrow.energon_index"  # shards.parquet metadata: b"false" = no index.sqlite


def has_energon_index(shards_schema: pa.Schema) -> bool:
    """False for a dataset prepared with `--no-energon-index` (no index.sqlite)."""
    return (shards_schema.metadata or {}).get(ENERGON_INDEX_KEY) != b"false"


class SideIndexWriter:
    def __init__(self, folder: str, shards: list, energon_index: bool = True):
        """`shards`: the listing entries (path, size, mtime, etag) of the shards to index, which name the set."""
        self.folder = folder
        self.energon_index = energon_index
        os.makedirs(os.path.join(folder, "arrow"), exist_ok=True)
        self.paths = {name: os.path.join(folder, rel) for name, rel in SIDE_INDEX_NAMES.items()}
        # in every file's metadata (schema.SET_KEY)
        self.set_id = set_id(*([getattr(f, a) for f in shards] for a in ("path", "size", "mtime", "etag")))
        samples_schema = SAMPLES_SCHEMA.with_metadata({SET_KEY: self.set_id})
        parts_schema = PARTS_SCHEMA.with_metadata({SET_KEY: self.set_id})
        self._samples = pq.ParquetWriter(
            self.paths["samples"], samples_schema, **parquet_options(SAMPLES_SCHEMA)
        )
        self._parts = pq.ParquetWriter(self.paths["parts"], parts_schema, **parquet_options(PARTS_SCHEMA))
        self._shards: list[tuple] = []
        self._pending: dict[str, list[pa.Table]] = {"samples": [], "parts": []}
        self._pending_rows = 0
        self._summary: list[pa.Table] = []
        self._rows = {"samples": 0, "parts": 0}
        self._groups = 0
        self.tables: dict[str, pa.Table] = {}  # the rows, when close() wrote them all as one group

    def _flush(self, force: bool = False) -> None:
        """Row groups of about 1M parts: one per shard would make small, slow-to-write groups."""
        if not force and self._pending_rows < _ROW_GROUP_ROWS:
            return
        self._groups += 1
        tables = {
            name: pa.concat_tables(pending).combine_chunks()  # one dictionary of part names
            for name, pending in self._pending.items()
            if pending
        }
        # the two files are written at once (Parquet encoding and zstd release the GIL), the summary meanwhile
        with cf.ThreadPoolExecutor(1, thread_name_prefix="ea-side-index") as pool:
            written = pool.submit(self._write, "samples", tables.get("samples"))
            self._write("parts", tables.get("parts"))
            if "parts" in tables:  # whole shards: add_shard adds one shard's rows at a time
                self._summary.append(summarize(tables["parts"]))
            written.result()
        if force and self._groups == 1:  # close() of a side index written as one group: it is all here
            self.tables = tables
        self._pending = {"samples": [], "parts": []}
        self._pending_rows = 0

    def _write(self, name: str, table: pa.Table | None) -> None:
        if table is not None:
            (self._samples if name == "samples" else self._parts).write_table(table, row_group_size=1 << 22)
            self._rows[name] += table.num_rows

    def add_shard(self, shard_id: int, path: str, size: int, mtime, etag, index: ShardIndex) -> None:
        n, m = index.sample_count, index.part_count
        ids_n = from_numpy(np.full(n, shard_id, dtype=np.int32), np.int32)
        self._pending["samples"].append(
            _table(
                SAMPLES_SCHEMA,
                [
                    ids_n,
                    from_numpy(np.arange(n, dtype=np.int64)),
                    index.sample_keys.cast(pa.string()),
                    from_numpy(index.sample_offsets),
                    from_numpy(index.sample_sizes),
                ],
            )
        )
        self._pending["parts"].append(
            _table(
                PARTS_SCHEMA,
                [
                    from_numpy(np.full(m, shard_id, dtype=np.int32), np.int32),
                    from_numpy(index.part_sample_index),
                    pc.dictionary_encode(index.part_names.cast(pa.string())).cast(
                        pa.dictionary(pa.int32(), pa.string())
                    ),
                    from_numpy(index.part_offsets),
                    from_numpy(index.part_sizes),
                    _crc_column(index.part_crcs, m),
                ],
            )
        )
        self._shards.append((shard_id, path, n, size, mtime, etag, index.data_end, index.fingerprint))
        self._pending_rows += m
        self._compact()
        self._flush()

    def _compact(self) -> None:
        """Tiny shards: every 256 pending per-shard tables become one (their columns copied once), so that 1M
        parts from 30-part shards are ~130 tables, not 30k (each holds buffers and objects of its own)."""
        for tables in self._pending.values():
            if len(tables) >= _COMPACT + 1 and all(
                t.num_rows < _ROW_GROUP_ROWS // _COMPACT for t in tables[-_COMPACT:]
            ):
                tables[-_COMPACT:] = [pa.concat_tables(tables[-_COMPACT:]).combine_chunks()]

    def close(self) -> dict[str, str]:
        self._flush(force=True)
        self._samples.close()
        self._parts.close()
        ids, paths, counts, sizes, mtimes, etags, ends, fingerprints = (
            (list(c) for c in zip(*self._shards)) if self._shards else ([[] for _ in range(8)])
        )
        mtime_valid = np.array([m is not None for m in mtimes], dtype=bool)
        table = pa.Table.from_arrays(
            [
                from_numpy(np.array(ids, dtype=np.int32), np.int32),
                from_bytes_list(paths, pa.string()),
                from_numpy(np.array(counts, dtype=np.int64)),
                from_numpy(np.array(sizes, dtype=np.int64)),
                from_numpy(np.array([m or 0.0 for m in mtimes], dtype=np.float64), np.float64, mtime_valid),
                from_bytes_list(etags, pa.string()),
                from_numpy(np.array(ends, dtype=np.int64)),
                from_bytes_list(fingerprints, pa.string()),
            ],
            schema=SHARDS_SCHEMA,
        )
        metadata = {SET_KEY: self.set_id}
        if not self.energon_index:
            metadata[ENERGON_INDEX_KEY] = b"false"
        table = table.replace_schema_metadata(metadata)
        pq.write_table(table, self.paths["shards"], **parquet_options(table.schema))
        summary = pa.concat_tables(self._summary) if self._summary else SUMMARY_SCHEMA.empty_table()
        summary_path = os.path.join(self.folder, SUMMARY_NAME)
        summary = with_identity(summary, table, self._rows["samples"], self._rows["parts"])
        pq.write_table(summary, summary_path, **parquet_options(summary.schema))
        return {
            **{rel: self.paths[name] for name, rel in SIDE_INDEX_NAMES.items()},
            SUMMARY_NAME: summary_path,
        }

    def abort(self) -> None:
        for w in (self._samples, self._parts):
            with contextlib.suppress(Exception):  # best effort while unwinding another error
                w.close()


class ShardSlices:
    """The rows of one shard at a time from a side-index Parquet file (rows in shard_id order), read one row group
    at a time with the row groups' shard_id statistics: an incremental prepare reusing shards in order reads each
    row group once and holds at most the groups of one shard. Without statistics the whole file is read."""

    def __init__(self, file: pq.ParquetFile):
        self.file = file
        meta = file.metadata
        ranges = []
        for g in range(meta.num_row_groups):
            stats = meta.row_group(g).column(0).statistics
            if stats is None or not stats.has_min_max:
                ranges = None
                break
            ranges.append((stats.min, stats.max))
        self.ranges = ranges
        self._groups: dict[int, tuple[pa.Table, np.ndarray]] = {}

    def _group(self, g: int) -> tuple[pa.Table, np.ndarray]:
        """Row group `g` (-1: the whole file) and its shard ids as numpy (converted once per group)."""
        if g not in self._groups:
            table = self.file.read() if g < 0 else self.file.read_row_group(g)
            self._groups[g] = (table, ints_to_numpy(table.column("shard_id")))
        return self._groups[g]

    def rows(self, shard_id: int) -> pa.Table:
        wanted = (
            [-1]
            if self.ranges is None
            else [g for g, (lo, hi) in enumerate(self.ranges) if lo <= shard_id <= hi]
        )
        for g in [g for g in self._groups if g not in wanted]:  # keep only this shard's groups
            del self._groups[g]
        pieces = []
        for g in wanted:
            table, ids = self._group(g)
            lo, hi = np.searchsorted(ids, shard_id, "left"), np.searchsorted(ids, shard_id, "right")
            pieces.append(table.slice(int(lo), int(hi - lo)))
        return pa.concat_tables(pieces) if pieces else self.file.schema_arrow.empty_table()

    def read_all(self) -> pa.Table:
        return self.file.read()


class SideIndex:
    """A prepared dataset's previous side index: `shards` in memory, samples and parts read per shard."""

    def __init__(self, shards: pa.Table, samples: ShardSlices, parts: ShardSlices):
        self.shards = shards
        self._samples, self._parts = samples, parts
        self._by_path = {p: i for i, p in enumerate(self.shards.column("path").to_pylist())}

    @property
    def samples(self) -> pa.Table:
        """The whole samples table (reads the file)."""
        return self._samples.read_all()

    @property
    def parts(self) -> pa.Table:
        """The whole parts table (reads the file)."""
        return self._parts.read_all()

    def identity(self, path: str) -> tuple[int, float | None, str | None] | None:
        i = self._by_path.get(path)
        if i is None:
            return None
        row = self.shards.slice(i, 1).to_pylist()[0]
        return row["size"], row["mtime"], row["etag"]

    def content(self, path: str) -> tuple[int, str | None]:
        """(data_end, fingerprint) recorded for an indexed shard."""
        i = self._by_path[path]
        return self.shards.column("data_end")[i].as_py(), self.shards.column("fingerprint")[i].as_py()

    def shard_rows(self, path: str) -> ShardIndex:
        i = self._by_path[path]
        sid = self.shards.column("shard_id")[i].as_py()
        samples = self._samples.rows(sid)
        parts = self._parts.rows(sid)
        return ShardIndex(
            sample_keys=samples.column("sample_key").combine_chunks(),
            sample_offsets=ints_to_numpy(samples.column("byte_offset")),
            sample_sizes=ints_to_numpy(samples.column("byte_size")),
            part_sample_index=ints_to_numpy(parts.column("sample_index")),
            part_names=parts.column("part_name").combine_chunks().cast(pa.string()),
            part_offsets=ints_to_numpy(parts.column("content_offset")),
            part_sizes=ints_to_numpy(parts.column("content_size")),
            data_end=self.shards.column("data_end")[i].as_py(),
            fingerprint=self.shards.column("fingerprint")[i].as_py(),
            part_crcs=ints_to_numpy(parts.column("content_crc32c")),
        )


def _open_parquet(storage, rel: str) -> pq.ParquetFile:
    """A side-index file opened for reading in place (local) or by ranged reads (object stores); read whole and
    checked when the dataset's manifest lists it (`open_verified_parquet`)."""
    verified = open_verified_parquet(storage, rel)
    if verified is not None:
        return verified
    if storage.is_local:
        path = storage.local_path(rel)
        if not os.path.exists(path):
            raise NotFound(storage.url_of(rel), "no such file")
        return pq.ParquetFile(path)
    try:
        return pq.ParquetFile(storage.retrying_fs.open(storage.path_of(rel), "rb"))
    except FileNotFoundError:
        raise NotFound(storage.url_of(rel), "no such file") from None


def open_verified_parquet(storage, rel: str) -> pq.ParquetFile | None:
    """`rel` as a ParquetFile over bytes checked against the dataset's manifest (`meta.manifest`), None when the
    manifest does not list it. Local: the file memory-mapped, hashed, then parsed from the same mapping. Object
    stores: streamed into an unnamed local temporary file while hashed (bounded memory), fetched again on a
    mismatch (the storage's retry budget), then parsed from a mapping of that file. IntegrityError when it never
    matches; NotFound when it is missing."""
    from energon_arrow.meta import manifest as digests

    manifest = digests.manifest_of(storage)
    if manifest is None or manifest.entry(rel) is None:
        return None
    if storage.is_local:
        path = storage.local_path(rel)
        if not os.path.exists(path):
            raise NotFound(storage.url_of(rel), "no such file")

        def read():
            return pa.memory_map(path).read_buffer()  # zero-copy: hashing reads the pages parsing uses
    else:

        def read():
            return _fetch_to_temp(storage, rel)

    buffer = digests.read_verified(storage, rel, read)
    return pq.ParquetFile(pa.BufferReader(buffer))


def _fetch_to_temp(storage, rel: str) -> pa.Buffer:
    """The whole object `rel` in an unnamed local temporary file, mapped (the mapping outlives the file)."""
    import mmap
    import tempfile

    with tempfile.TemporaryFile(prefix="ea-verified-") as f:
        for chunk in storage.iter_chunks(rel):
            f.write(chunk)
        f.flush()
        if not f.tell():
            return pa.py_buffer(b"")
        return pa.py_buffer(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))


def _all_checksummed(parts: pq.ParquetFile) -> bool:
    """Whether every part row has its `content_crc32c` (the row groups' null counts; none: not known, False)."""
    meta = parts.metadata
    col = parts.schema_arrow.names.index("content_crc32c")
    for g in range(meta.num_row_groups):
        stats = meta.row_group(g).column(col).statistics
        if stats is None or not getattr(stats, "has_null_count", True) or stats.null_count != 0:
            return False
    return True


def read_side_index(storage) -> SideIndex | None:
    """The previous side index for an incremental prepare; None when there is none usable - missing, of another
    schema, unreadable (a 0-byte or cut object left by a publish that was killed on an object store) or files of
    different prepares (a publish cut off between them): the prepare then indexes every shard again, which is what
    completes such a torn publish. A file that does not match the dataset's manifest after the retries counts as
    unreadable (the prepare that re-indexes is what the error would ask for)."""
    from energon_arrow.meta.manifest import IntegrityError

    files = {}
    try:
        for name, rel in SIDE_INDEX_NAMES.items():
            files[name] = _open_parquet(storage, f"{SIDE_INDEX_DIR.split('/', 1)[0]}/{rel}")
        shards = with_optional_columns(files["shards"].read(), "shards")
    except (NotFound, pa.ArrowInvalid, IntegrityError):
        return None
    if shards.schema.names != SHARDS_SCHEMA.names:
        return None
    for name, schema in (("samples", SAMPLES_SCHEMA), ("parts", PARTS_SCHEMA)):
        if files[name].schema_arrow.names != schema.names:
            return None
    # files of two prepares (a publish cut off on an object store): the shards table would give rows the samples
    # and parts files do not hold (a shard reused with none)
    others = [files[name].schema_arrow.metadata for name in ("samples", "parts")]
    if not one_side_index(shards, others, files["samples"].metadata.num_rows):
        return None
    if not _all_checksummed(
        files["parts"]
    ):  # a conversion of index.sqlite: the shards are read for their CRCs
        return None
    return SideIndex(shards, ShardSlices(files["samples"]), ShardSlices(files["parts"]))
