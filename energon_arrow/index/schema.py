"""Arrow schemas of the Parquet side indexes that prepare writes under `.nv-meta/arrow/` (docs/format.md).

Row order is part of the contract: samples by (shard_id, sample_index); parts by (shard_id, sample_index,
content_offset); shards by shard_id. shard_id is energon's tar_file_id (position in .info.json shard_counts).
"""

from __future__ import annotations

import hashlib

import pyarrow as pa
import pyarrow.compute as pc

SIDE_INDEX_DIR = ".nv-meta/arrow"
SIDE_INDEX_VERSION = 1

SHARDS_SCHEMA = pa.schema(
    [
        pa.field("shard_id", pa.int32(), nullable=False),
        pa.field("path", pa.string(), nullable=False),  # relative to the dataset root, POSIX
        pa.field("sample_count", pa.int64(), nullable=False),
        pa.field("size", pa.int64(), nullable=False),  # tar size in bytes when indexed
        pa.field("mtime", pa.float64()),  # seconds since epoch, when the store has one
        pa.field("etag", pa.string()),  # object stores only
        pa.field("data_end", pa.int64(), nullable=False),  # end of the last member's padded data
        pa.field("fingerprint", pa.string()),  # index.fingerprint of the content; None: not recorded
    ]
)

SAMPLES_SCHEMA = pa.schema(
    [
        pa.field("shard_id", pa.int32(), nullable=False),
        pa.field("sample_index", pa.int64(), nullable=False),  # position inside its shard
        pa.field("sample_key", pa.string(), nullable=False),
        pa.field("byte_offset", pa.int64(), nullable=False),  # first header block (PAX/GNU headers included)
        pa.field("byte_size", pa.int64(), nullable=False),  # up to the next sample / end of data
    ]
)

PARTS_SCHEMA = pa.schema(
    [
        pa.field("shard_id", pa.int32(), nullable=False),
        pa.field("sample_index", pa.int64(), nullable=False),
        pa.field("part_name", pa.dictionary(pa.int32(), pa.string()), nullable=False),
        pa.field("content_offset", pa.int64(), nullable=False),  # payload start (no header)
        pa.field("content_size", pa.int64(), nullable=False),
        # CRC32C of the payload (tar.crc); null: not recorded (converted from index.sqlite, or written before it)
        pa.field("content_crc32c", pa.uint32()),
    ]
)

# Columns that side indexes written by earlier versions lack; readers add them as nulls.
OPTIONAL_COLUMNS = {"shards": ("fingerprint",), "parts": ("content_crc32c",)}

SIDE_INDEX_FILES = {"shards": SHARDS_SCHEMA, "samples": SAMPLES_SCHEMA, "parts": PARTS_SCHEMA}

# Schema metadata key of an id that the shards, samples and parts files of one side index share (`set_id`). An object
# store takes a publish as one PUT per file, so a publish cut off can leave files of two prepares side by side;
# readers must not take them as one index (files written before this key: all without it, taken as one set).
SET_KEY = b"energon_arrow.set"


def set_id(paths, sizes, mtimes, etags) -> bytes:
    """The set id of a side index of these shards (in this order, with these identities when indexed): prepares
    of the same shard files share it, and they write the same rows (an interrupted prepare resumed writes the
    bytes of an uninterrupted one)."""
    digest = hashlib.sha256(f"side index {SIDE_INDEX_VERSION}\n".encode())
    for shard in zip(paths, sizes, mtimes, etags):
        digest.update(repr(shard).encode() + b"\n")
    return digest.hexdigest()[:32].encode()


def one_side_index(shards: pa.Table, others, sample_rows: int) -> bool:
    """Whether a shards table and the samples and parts files with the schema metadata `others` (None: no
    metadata) and `sample_rows` samples were written together: one set id in all, and the shards' sample counts
    add up to the samples file's rows."""
    ids = {(m or {}).get(SET_KEY) for m in (shards.schema.metadata, *others)}
    return len(ids) == 1 and (pc.sum(shards.column("sample_count")).as_py() or 0) == sample_rows


# Parquet encodings by column name (the other columns: dictionary, plain where the dictionary grows too large):
# offsets, payload sizes and indexes delta-coded (DuckDB scans them about twice as fast as the plain pages a
# dictionary falls back to, and they are smaller); sample keys with their lengths delta-coded (a quarter less CPU
# to scan than plain); `byte_size` stays dictionary-encoded (whole tar blocks: few distinct values); checksums
# plain (random values: a dictionary would only be abandoned)
_ENCODINGS = {
    **dict.fromkeys(("sample_index", "byte_offset", "content_offset", "content_size"), "DELTA_BINARY_PACKED"),
    "sample_key": "DELTA_LENGTH_BYTE_ARRAY",
    "content_crc32c": "PLAIN",
}


def parquet_options(schema: pa.Schema) -> dict:
    """`pq.ParquetWriter` / `pq.write_table` options of every side-index file: zstd, statistics, _ENCODINGS."""
    encoded = {f.name: _ENCODINGS[f.name] for f in schema if f.name in _ENCODINGS}
    return {
        "compression": "zstd",
        "write_statistics": True,
        "use_dictionary": [f.name for f in schema if f.name not in encoded],
        "column_encoding": encoded,
    }


def with_optional_columns(table: pa.Table, name: str) -> pa.Table:
    """`table` (side-index file `name`) with the optional columns it lacks added as nulls."""
    schema = SIDE_INDEX_FILES[name]
    for column in OPTIONAL_COLUMNS.get(name, ()):
        if column not in table.schema.names:
            table = table.append_column(
                schema.field(column), pa.nulls(table.num_rows, schema.field(column).type)
            )
    return table
