"""The DuckDB catalog of one dataset: a read-only connection with the dataset's views.

Base tables are the side-index Parquet files, read in place by DuckDB (local files directly, remote stores through
the Storage's fsspec filesystem, each range checked against the manifest's chunk CRCs) or, for an index converted
in memory, the Arrow tables themselves (zero-copy).
Derived views are plain SQL over those. After setup the connection has external access off except for the
side-index folder, and its configuration is locked.
"""

from __future__ import annotations

import re

import duckdb
import pyarrow as pa

from energon_arrow.adapters import Storage
from energon_arrow.index.schema import SIDE_INDEX_DIR
from energon_arrow.index.summary import SUMMARY_FILE
from energon_arrow.query.limits import QueryLimits

DUCKDB_CONFIG = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}

# name -> (description, SQL); the SQL may use the base views, `_split_shards`, `_exclude_entries` (the exclude entries
# with the sample_index each `<shard>/<key>` entry matches) and `_excluded_bits` (per shard with excluded samples, a
# BIT of its excluded sample indexes): both filled by `use_exclusions` (query.exclusions).
DERIVED_VIEWS = {
    "sample_parts": (
        "every part with its sample key and shard path",
        """SELECT p.shard_id, sh.path AS shard_path, p.sample_index, s.sample_key, p.part_name,
                  p.content_offset, p.content_size
           FROM parts p JOIN samples s USING (shard_id, sample_index) JOIN shards sh USING (shard_id)""",
    ),
    "part_types": (
        "per part name: parts, samples having it, total/min/avg/max bytes",
        """SELECT part_name, sum(parts)::BIGINT AS parts, sum(samples)::BIGINT AS samples,
                  sum(total_bytes)::BIGINT AS total_bytes, min(min_bytes) AS min_bytes,
                  sum(total_bytes) / sum(parts) AS avg_bytes, max(max_bytes) AS max_bytes
           FROM _part_summary GROUP BY part_name ORDER BY part_name""",
    ),
    "splits": (
        "split.yaml: one row per (split, shard) in split order, with whether the shard is excluded",
        "SELECT * FROM _split_shards",
    ),
    "excluded": (
        "split.yaml `exclude` entries (expanded), their kind, and whether they match a shard or sample",
        """SELECT entry, kind, shard_id, path, sample_key, kind = 'shard' OR sample_index IS NOT NULL AS matched
           FROM _exclude_entries""",
    ),
    "split_samples": (
        "the effective samples of every split (excluded shards and samples removed), in iteration order",
        """SELECT sp.split, sp.position AS shard_position, s.shard_id, sp.path AS shard_path, s.sample_index,
                  s.sample_key, s.byte_offset, s.byte_size
           FROM (SELECT sp.*, b.bits FROM _split_shards sp LEFT JOIN _excluded_bits b USING (shard_id)
                 WHERE NOT sp.excluded) sp
           JOIN samples s ON s.shard_id = sp.shard_id
           WHERE sp.bits IS NULL OR s.sample_index >= bit_length(sp.bits)
                 OR get_bit(sp.bits, s.sample_index::INTEGER) = 0""",
    ),
    "split_sizes": (
        "per split: shards, excluded shards, samples (as listed) and effective samples (split_samples' rows), "
        "from the shards table and the resolved exclusions: no sample rows read",
        """SELECT sp.split, count(*) AS shards, count(*) FILTER (sp.excluded) AS excluded_shards,
                  sum(sh.sample_count)::BIGINT AS samples,
                  coalesce(sum(sh.sample_count - coalesce(x.n, 0)) FILTER (NOT sp.excluded), 0)::BIGINT
                      AS effective_samples
           FROM _split_shards sp JOIN shards sh USING (shard_id)
           LEFT JOIN (SELECT shard_id, count(*) AS n FROM _exclude_entries WHERE sample_index IS NOT NULL
                      GROUP BY shard_id) x USING (shard_id)
           GROUP BY sp.split""",
    ),
}

# part_types of a side index without a summary (index.summary) until `use_summary`: the same columns by a scan
PART_TYPES_SCAN = """SELECT part_name, count(*) AS parts, count(DISTINCT (shard_id, sample_index)) AS samples,
                            sum(content_size)::BIGINT AS total_bytes, min(content_size) AS min_bytes,
                            avg(content_size) AS avg_bytes, max(content_size) AS max_bytes
                     FROM parts GROUP BY part_name ORDER BY part_name"""

# _exclude_entries and _excluded_bits until `use_exclusions`: an error as soon as a row is read (Dataset resolves
# the exclusions before it runs a query that names a view using them); no exclude entries: empty, and right
_UNRESOLVED = "FROM _exclude_table WHERE error('split.yaml exclusions not resolved (Dataset.exclusions)')"
UNRESOLVED_VIEWS = {
    "_exclude_entries": f"SELECT *, NULL::BIGINT AS sample_index {_UNRESOLVED}",
    "_excluded_bits": f"SELECT shard_id, NULL::BIT AS bits {_UNRESOLVED}",
}
# views whose rows depend on the resolved exclusions
EXCLUSION_VIEWS = ("excluded", "split_samples", "split_sizes", *UNRESOLVED_VIEWS)

BASE_VIEWS = {
    "samples": "one row per sample: shard_id, sample_index, sample_key, byte_offset, byte_size",
    "parts": "one row per part: shard_id, sample_index, part_name, content_offset, content_size",
    "shards": "one row per tar shard: shard_id, path, sample_count, size, mtime, etag, data_end",
}


PUBLIC_VIEWS = (
    *BASE_VIEWS,
    *DERIVED_VIEWS,
    "_split_shards",
    "_exclude_entries",
    "_exclude_table",
    "_exclude_resolved",
    "_excluded_bits",
    "_exclude_bitmaps",
    "_part_summary",
)


def _duckdb_url(storage: Storage, rel: str) -> str:
    return storage.local_path(rel) if storage.is_local else storage.url_of(rel)


def _duckdb_reads(storage: Storage) -> bool:
    """Whether DuckDB's own Parquet reader can read this storage's files (local, or through the fsspec
    filesystem registered with it: S3, memory). Others (e.g. msc:// through multi-storage-client, whose fsspec
    filesystem lacks what DuckDB asks of one) are scanned lazily as pyarrow datasets."""
    return storage.is_local or storage.protocol in ("s3", "memory")


def parquet_dataset(storage: Storage, rel: str):
    """A lazily scanned pyarrow dataset over one Parquet file of `storage` (reads retry: `retrying_fs`; checked
    against the manifest's chunk CRCs: meta.verified_ranges)."""
    import pyarrow.dataset as pads
    from pyarrow.fs import FSSpecHandler, PyFileSystem

    from energon_arrow.meta.verified_ranges import verified_fs

    fs = PyFileSystem(FSSpecHandler(verified_fs(storage)))
    return pads.dataset(storage.path_of(rel), filesystem=fs, format="parquet")


def reading_fs(storage: Storage):
    """The filesystem DuckDB reads `storage`'s side index through (meta.verified_ranges); None where DuckDB reads
    the files itself (local) or not at all."""
    if storage.is_local or not _duckdb_reads(storage):
        return None
    from energon_arrow.meta.verified_ranges import verified_fs  # imports fsspec: only for remote storage

    return verified_fs(storage)


def connect(
    storage: Storage,
    base: dict[str, pa.Table | None],
    splits: pa.Table,
    excludes: pa.Table,
    limits: QueryLimits | None = None,
    summary: bool = False,
    fs=None,
) -> duckdb.DuckDBPyConnection:
    """A locked, read-only connection with every view. `base[name]` None = read `.nv-meta/arrow/{name}.parquet`.
    `limits`: memory limit, spill folder and threads (`QueryLimits()` defaults when None). `summary`: the side
    index's `summary.parquet` describes it (part_types reads it; otherwise it scans `parts` until `use_summary`).
    `fs`: the filesystem DuckDB reads a remote side index through (`reading_fs`; made here when None)."""
    con = duckdb.connect(":memory:", config=DUCKDB_CONFIG)
    (limits or QueryLimits()).apply(con)
    reads_files = any(t is None for t in base.values()) and _duckdb_reads(storage)
    if reads_files and not storage.is_local:
        # DuckDB reads through it: its requests retry there, and what it reads is checked (meta.verified_ranges)
        con.register_filesystem(fs or reading_fs(storage))
    files = {name: f"{name}.parquet" for name in base}
    if summary:
        files["_part_summary"] = SUMMARY_FILE
    for name, file in files.items():
        table = base.get(name)
        rel = f"{SIDE_INDEX_DIR}/{file}"
        if table is None and reads_files:
            url = _duckdb_url(storage, rel).replace("'", "''")
            con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet('{url}')")
        else:
            con.register(name, table if table is not None else parquet_dataset(storage, rel))
    con.register("_split_shards", splits)
    con.register("_exclude_table", excludes)
    for name, sql in UNRESOLVED_VIEWS.items():
        con.execute(f"CREATE VIEW {name} AS {sql}")
    for name, (_, sql) in DERIVED_VIEWS.items():
        con.execute(f"CREATE VIEW {name} AS {sql if summary or name != 'part_types' else PART_TYPES_SCAN}")
    allowed = []
    if reads_files:
        folder = _duckdb_url(storage, SIDE_INDEX_DIR).rstrip("/") + "/"
        allowed = [folder]
        if "://" in folder:
            scheme, rest = folder.split("://", 1)
            allowed.append(f"{scheme}:///{rest}")
    quoted = ", ".join("'" + a.replace("'", "''") + "'" for a in allowed)
    con.execute(f"SET allowed_directories = [{quoted}]")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


def use_summary(con: duckdb.DuckDBPyConnection, summary: pa.Table) -> None:
    """Answer part_types from `summary` (index.summary, computed for a side index that had none)."""
    con.register("_part_summary", summary)
    con.execute(f"CREATE OR REPLACE VIEW part_types AS {DERIVED_VIEWS['part_types'][1]}")


_EXCLUSION_NAMES = re.compile(rf"\b({'|'.join(EXCLUSION_VIEWS)})\b", re.IGNORECASE)


def uses_exclusions(query: str) -> bool:
    """Whether `query` may read a view that depends on the resolved exclusions (by name: a column or string
    of that name counts too, which only resolves them earlier than needed)."""
    return _EXCLUSION_NAMES.search(query) is not None


def use_exclusions(con: duckdb.DuckDBPyConnection, resolved: pa.Table, bitmaps: pa.Table) -> None:
    """Answer _exclude_entries from `resolved` (the exclude table with each entry's sample_index) and
    _excluded_bits from `bitmaps` (query.exclusions.bitmaps)."""
    con.register("_exclude_resolved", resolved)
    con.register("_exclude_bitmaps", bitmaps)
    con.execute("CREATE OR REPLACE VIEW _exclude_entries AS SELECT * FROM _exclude_resolved")
    con.execute(
        "CREATE OR REPLACE VIEW _excluded_bits AS SELECT shard_id, bits::BIT AS bits FROM _exclude_bitmaps"
    )


def view_columns(con: duckdb.DuckDBPyConnection) -> dict[str, list[str]]:
    """Public view name -> column names."""
    return {name: con.sql(f"SELECT * FROM {name} LIMIT 0").columns for name in (*BASE_VIEWS, *DERIVED_VIEWS)}
