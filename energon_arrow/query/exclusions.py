"""split.yaml's sample exclusions resolved to rows, computed once and cached beside the side index.

An `exclude` entry `<shard>/<key>` removes the sample of that shard with that key (energon 7.4.1; sample keys are
unique in a dataset). Finding those samples matches the entries' keys with the sample keys: a join that reads and
hashes the keys of every shard named (3.5 CPU-seconds for the 80M keys of bench_query_scale's 100M samples). Its
result is small, one sample_index per entry, so it is computed when a query first needs it and cached in
`.nv-meta/arrow/excluded-<split config>.parquet` (CACHE_SCHEMA: the entries' shard_id and sample_key, and the
sample_index they match, null for none). A cache is used only when its entries equal the current ones and its
metadata names what it was computed from (`cache_key`: the side index's `index.summary.identity` and, for a
dataset with a manifest, the recorded SHA-256 of the samples table its keys come from): an edited split.yaml, a
dataset prepared again or a samples table replaced makes it stale, and it is computed again and replaced (one atomic write; kept in memory on a
read-only store). With the entries resolved, `info` counts matched entries from this small table and
`split_samples` drops excluded samples by one bit test per row: `bitmaps` gives each shard with excluded
samples a bitmap of its sample indexes (a DuckDB BIT value, carried through the join with the split's shards;
3x less CPU than an anti join with the 1M excluded rows at 100M samples).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from energon_arrow.adapters import Storage, StorageError
from energon_arrow.index.from_sqlite import parquet_bytes
from energon_arrow.index.schema import SIDE_INDEX_DIR
from energon_arrow.meta.manifest import manifest_of
from energon_arrow.query.errors import NotPreparedError
from energon_arrow.query.sideindex import read_parquet
from energon_arrow.tar.arrow import from_numpy

log = logging.getLogger(__name__)

# Parquet metadata of a cache: the identity of the side index it was computed for
CACHE_KEY = b"energon_arrow.excluded_of"
SAMPLES_REL = f"{SIDE_INDEX_DIR}/samples.parquet"
CACHE_SCHEMA = pa.schema(
    [
        pa.field("shard_id", pa.int32(), nullable=False),
        pa.field("sample_key", pa.string(), nullable=False),
        pa.field("sample_index", pa.int64()),  # null: no sample of the shard has the key
    ]
)
MATCH_SQL = """SELECT e.pos, s.sample_index FROM samples s
               JOIN _entries_to_match e ON s.shard_id = e.shard_id AND s.sample_key = e.sample_key
               WHERE s.shard_id BETWEEN ? AND ?"""
# entries per join: the entries come by shard, so each join reads the row groups of its shards only, with a hash
# table that stays in cache (a fifth less CPU than one join of 1M entries)
MATCH_BATCH = 1 << 17


def cache_key(storage: Storage, side_identity: bytes) -> bytes:
    """The key a cache of `storage`'s resolved exclusions is stored under (see the module docstring)."""
    manifest = manifest_of(storage)
    digest = manifest.digest(SAMPLES_REL) if manifest is not None else None
    return side_identity if digest is None else side_identity + b"|samples.parquet sha256 " + digest.encode()


def cache_rel(split_config: str) -> str:
    return f"{SIDE_INDEX_DIR}/excluded-{split_config.replace('/', '_')}.parquet"


def sample_entries(excludes: pa.Table) -> pa.Table:
    """The `<shard>/<key>` rows of an exclude table (query.splits.EXCLUDES_SCHEMA): shard_id, sample_key."""
    rows = excludes.filter(pc.equal(excludes.column("kind"), "sample"))
    return pa.Table.from_arrays(
        [rows.column("shard_id").combine_chunks(), rows.column("sample_key").combine_chunks()],
        schema=CACHE_SCHEMA.remove(2),
    )


def read_cache(storage: Storage, rel: str, entries: pa.Table, identity: bytes) -> pa.Array | None:
    """The sample_index of each of `entries` from the cache at `rel`, or None when it is missing, unreadable or
    computed for other entries or another side index."""
    if not storage.exists(rel):
        return None
    try:
        cached = read_parquet(storage, rel)
    except (NotPreparedError, StorageError) as exc:
        log.warning("%s; it is computed again", exc)
        return None
    if (
        (cached.schema.metadata or {}).get(CACHE_KEY) != identity
        or cached.schema.remove_metadata() != CACHE_SCHEMA
        or cached.num_rows != entries.num_rows
        or not cached.select(["shard_id", "sample_key"]).equals(entries)
    ):
        return None
    return cached.column("sample_index").combine_chunks()


def match(entries: pa.Table, run: Callable[..., pa.Table]) -> pa.Array:
    """The sample_index each entry matches (null: none): joins of the entries (in batches of consecutive
    entries) with `samples`, run by `run(sql, params, tables={name: table})` on the dataset's connection."""
    n = entries.num_rows
    numbered = entries.append_column("pos", from_numpy(np.arange(n, dtype=np.int64)))
    ids = entries.column("shard_id").to_numpy()
    index = np.zeros(n, np.int64)
    hit = np.zeros(n, bool)
    for start in range(0, n, MATCH_BATCH):
        part = slice(start, min(n, start + MATCH_BATCH))
        bounds = [int(ids[part].min()), int(ids[part].max())]
        found = run(MATCH_SQL, bounds, tables={"_entries_to_match": numbered.slice(start, MATCH_BATCH)})
        pos = found.column("pos").to_numpy()
        index[pos] = found.column("sample_index").to_numpy()
        hit[pos] = True
    return from_numpy(index, np.int64, hit)


def write_cache(storage: Storage, rel: str, entries: pa.Table, indexes: pa.Array, identity: bytes) -> None:
    """Publish the resolved entries at `rel` (atomically); a store that refuses keeps them in memory only."""
    table = entries.append_column(CACHE_SCHEMA.field("sample_index"), indexes)
    try:
        storage.write_atomic(rel, parquet_bytes(table.replace_schema_metadata({CACHE_KEY: identity})))
    except (StorageError, OSError) as exc:
        log.warning("%s: cannot cache the resolved sample exclusions (%s)", storage.url_of(rel), exc)


BITMAPS_SCHEMA = pa.schema([pa.field("shard_id", pa.int32(), nullable=False), pa.field("bits", pa.binary())])


def bitmaps(resolved: pa.Table, sample_counts: np.ndarray) -> pa.Table:
    """Per shard with matched exclusions (`resolved`: the exclude table `with_indexes`): shard_id and a bitmap of
    its excluded sample indexes (bit i = sample_index i, most significant bit first, as DuckDB casts a BLOB to
    BIT), `sample_counts[shard_id]` bits rounded up to bytes (longer when an index is larger)."""
    index = resolved.column("sample_index").combine_chunks()
    valid = pc.is_valid(index)
    ids = resolved.column("shard_id").combine_chunks().filter(valid).to_numpy().astype(np.int64)
    idx = index.filter(valid).to_numpy()
    shards, pos = np.unique(ids, return_inverse=True)
    size = np.asarray(sample_counts, np.int64)[shards]
    np.maximum.at(size, pos, idx + 1)
    starts = np.r_[0, np.cumsum((size + 7) // 8)]
    data = np.zeros(int(starts[-1]), np.uint8)
    np.bitwise_or.at(data, starts[pos] + idx // 8, (0x80 >> (idx % 8)).astype(np.uint8))
    offsets = pa.py_buffer(starts.astype(np.int32))  # one bit per sample: 2 GiB of offsets is 17G samples
    bits = pa.Array.from_buffers(pa.binary(), len(shards), [None, offsets, pa.py_buffer(data)])
    return pa.Table.from_arrays([from_numpy(shards, np.int32), bits], schema=BITMAPS_SCHEMA)


def with_indexes(excludes: pa.Table, indexes: pa.Array | None) -> pa.Table:
    """`excludes` with a sample_index column: `indexes` for its sample rows (which are contiguous, see
    query.splits.exclude_table), null for the others."""
    kind = excludes.column("kind").combine_chunks()
    sample = pc.equal(kind, "sample").to_numpy(zero_copy_only=False)
    first = int(np.argmax(sample)) if sample.any() else 0
    n, m = excludes.num_rows, int(sample.sum())
    column = pa.concat_arrays(
        [
            pa.nulls(first, pa.int64()),
            indexes if m else pa.nulls(0, pa.int64()),
            pa.nulls(n - first - m, pa.int64()),
        ]
    )
    return excludes.append_column(CACHE_SCHEMA.field("sample_index"), column)
