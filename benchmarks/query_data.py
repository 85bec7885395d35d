"""Synthetic dataset indexes for bench_query: energon's index.sqlite and our Parquet side index for the same rows.

No tar shards are written (the benchmarks only read indexes; datasets are opened with verify=False). Layout under
`benchmarks/data/query-<n>/`: `primary/` (n samples, 3 parts each: jpg/txt/json, 1,000 samples per shard,
split 8:1:1 by shard, `exclude` with 10,000 sample entries of train shards) and `aux/` (n samples with one `jpg`
part each, same keys, one split holding every shard).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3

import numpy as np
import pyarrow as pa

from energon_arrow.index.from_sqlite import parquet_bytes
from energon_arrow.index.schema import PARTS_SCHEMA, SAMPLES_SCHEMA, SHARDS_SCHEMA

DATA_DIR = os.path.join(os.path.dirname(__file__), "data")
PER_SHARD = 1000
SAMPLE_DDL = """
CREATE TABLE samples (tar_file_id INTEGER NOT NULL, sample_key TEXT NOT NULL UNIQUE, sample_index INTEGER NOT NULL,
                      byte_offset INTEGER, byte_size INTEGER);
CREATE TABLE sample_parts (tar_file_id INTEGER, sample_index INTEGER, part_name TEXT, content_byte_offset INTEGER,
                           content_byte_size INTEGER);
"""
INDEX_DDL = """
CREATE INDEX idx_samples_by_tar_and_idx ON samples(tar_file_id, sample_index);
CREATE INDEX idx_sample_parts_seq ON sample_parts(tar_file_id, sample_index, content_byte_offset);
CREATE INDEX idx_sample_parts_full ON sample_parts(tar_file_id, sample_index, part_name, content_byte_offset,
                                                   content_byte_size);
"""


def _tables(n: int, parts: list[str], seed: int) -> tuple[pa.Table, pa.Table, pa.Table]:
    rng = np.random.default_rng(seed)
    shard = (np.arange(n) // PER_SHARD).astype(np.int32)
    index = np.arange(n, dtype=np.int64) % PER_SHARD
    sizes = rng.integers(1_000, 200_000, size=(n, len(parts))).astype(np.int64)
    padded = (sizes + 511) // 512 * 512 + 512  # header + padded payload per part
    sample_size = padded.sum(axis=1)
    before = np.cumsum(sample_size) - sample_size  # bytes before each sample, over all shards
    offsets = before - before[shard * PER_SHARD]  # minus the bytes before the shard's first sample
    keys = pa.array([f"{s:06d}_{i:06d}" for s, i in zip(shard.tolist(), index.tolist())])
    samples = pa.table([shard, index, keys, offsets, sample_size], schema=SAMPLES_SCHEMA)
    part_offsets = offsets[:, None] + np.cumsum(padded, axis=1) - padded + 512
    names = pa.DictionaryArray.from_arrays(np.tile(np.arange(len(parts), dtype=np.int32), n), pa.array(parts))
    parts_t = pa.table(
        [
            np.repeat(shard, len(parts)),
            np.repeat(index, len(parts)),
            names,
            part_offsets.ravel(),
            sizes.ravel(),
        ],
        schema=PARTS_SCHEMA,
    )
    n_shards = int(shard.max()) + 1
    ends = np.bincount(shard, weights=sample_size, minlength=n_shards).astype(np.int64)
    shards = pa.table(
        [np.arange(n_shards, dtype=np.int32), pa.array([f"shards/shard-{i:06d}.tar" for i in range(n_shards)]),
         np.full(n_shards, PER_SHARD, np.int64), ends + 1024, pa.nulls(n_shards, pa.float64()),
         pa.nulls(n_shards, pa.string()), ends, pa.nulls(n_shards, pa.string())],
        schema=SHARDS_SCHEMA,
    )  # fmt: skip
    return shards, samples, parts_t


def _write_sqlite(path: str, samples: pa.Table, parts: pa.Table) -> None:
    con = sqlite3.connect(path)
    con.executescript(SAMPLE_DDL)
    s = samples.to_pydict()
    con.executemany(
        "INSERT INTO samples VALUES (?, ?, ?, ?, ?)",
        zip(s["shard_id"], s["sample_key"], s["sample_index"], s["byte_offset"], s["byte_size"]),
    )
    p = parts.to_pydict()
    con.executemany(
        "INSERT INTO sample_parts VALUES (?, ?, ?, ?, ?)",
        zip(p["shard_id"], p["sample_index"], p["part_name"], p["content_offset"], p["content_size"]),
    )
    con.executescript(INDEX_DDL)
    con.commit()
    con.close()


def _write_dataset(root: str, n: int, parts: list[str], seed: int, split: dict, exclude: list[str]) -> None:
    shards, samples, parts_t = _tables(n, parts, seed)
    meta = os.path.join(root, ".nv-meta")
    os.makedirs(os.path.join(meta, "arrow"))
    names = shards.column("path").to_pylist()
    with open(os.path.join(meta, ".info.json"), "w") as f:
        json.dump({"energon_version": "7.4.1", "shard_counts": dict.fromkeys(names, PER_SHARD)}, f, indent=2)
    with open(os.path.join(meta, "split.yaml"), "w") as f:
        json.dump(
            {"split_parts": {k: [names[i] for i in v] for k, v in split.items()}, "exclude": exclude}, f
        )
    with open(os.path.join(meta, "dataset.yaml"), "w") as f:
        f.write("__module__: megatron.energon\n__class__: CrudeWebdataset\n")
    with open(os.path.join(meta, "index.uuid"), "w") as f:
        f.write(f"00000000-0000-0000-0000-{seed:012d}")
    for name, table in (("shards", shards), ("samples", samples), ("parts", parts_t)):
        with open(os.path.join(meta, "arrow", f"{name}.parquet"), "wb") as f:
            f.write(parquet_bytes(table))
    _write_sqlite(os.path.join(meta, "index.sqlite"), samples, parts_t)


def generate(n: int, exclusions: int = 10_000) -> str:
    """Create (once) the primary and aux indexes for `n` samples; returns the folder holding both."""
    root = os.path.join(DATA_DIR, f"query-{n}")
    if os.path.isdir(os.path.join(root, "aux", ".nv-meta")):
        return root
    tmp = root + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    n_shards = n // PER_SHARD
    train, val = int(n_shards * 0.8), int(n_shards * 0.9)
    split = {"train": range(train), "val": range(train, val), "test": range(val, n_shards)}
    rng = np.random.default_rng(7)
    picked = np.sort(rng.choice(train * PER_SHARD, size=min(exclusions, train * PER_SHARD), replace=False))
    exclude = [
        f"shards/shard-{i // PER_SHARD:06d}.tar/{i // PER_SHARD:06d}_{i % PER_SHARD:06d}" for i in picked
    ]
    _write_dataset(os.path.join(tmp, "primary"), n, ["jpg", "txt", "json"], 1, split, exclude)
    _write_dataset(os.path.join(tmp, "aux"), n, ["jpg"], 2, {"train": range(n_shards)}, [])
    shutil.rmtree(root, ignore_errors=True)
    os.replace(tmp, root)
    return root
