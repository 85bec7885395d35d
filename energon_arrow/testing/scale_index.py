"""A synthetic side index of N samples (bench_query_scale, query tests), written like prepare writes it, in bounded
memory.

Only `.nv-meta` is written, with the side index's summary (no tars, no index.sqlite: the queries read the
Parquet side index; open such datasets with verify=False). `write_side_index(root, n, exclusions)`: 1,000 samples per shard, 3 parts each
(jpg/txt/json), split 8:1:1 by shard, and `exclude` with `exclusions` sample entries of train shards plus 10
whole train shards. The rows are generated and written in blocks of 1M samples (row groups of the same size as
prepare's), so 100M samples need no more memory than 1M.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from energon_arrow.index.schema import PARTS_SCHEMA, SAMPLES_SCHEMA, SHARDS_SCHEMA, parquet_options
from energon_arrow.index.summary import SUMMARY_FILE, summarize, with_identity

PER_SHARD = 1000
PARTS = ("jpg", "txt", "json")
BLOCK = 1_000_000  # samples per generated block (a multiple of PER_SHARD)


def _padded(values: np.ndarray, width: int) -> pa.Array:
    return pc.utf8_lpad(pc.cast(pa.array(values), pa.string()), width, "0")


def _block(start: int, stop: int, rng: np.random.Generator) -> tuple[pa.Table, pa.Table, np.ndarray]:
    """Samples and parts of global samples [start, stop), and each shard's data end (shards of the block)."""
    g = np.arange(start, stop, dtype=np.int64)
    shard = (g // PER_SHARD).astype(np.int32)
    index = g % PER_SHARD
    sizes = rng.integers(1_000, 200_000, size=(len(g), len(PARTS))).astype(np.int64)
    padded = (sizes + 511) // 512 * 512 + 512  # header + padded payload per part
    sample_size = padded.sum(axis=1)
    ends = np.cumsum(sample_size)
    first = np.arange(0, len(g), PER_SHARD)
    base = np.repeat(ends[first] - sample_size[first], PER_SHARD)[: len(g)]
    offsets = ends - sample_size - base
    keys = pc.binary_join_element_wise(_padded(shard, 6), _padded(index, 6), "_")
    samples = pa.table([shard, index, keys, offsets, sample_size], schema=SAMPLES_SCHEMA)
    part_offsets = offsets[:, None] + np.cumsum(padded, axis=1) - padded + 512
    names = pa.DictionaryArray.from_arrays(
        np.tile(np.arange(len(PARTS), dtype=np.int32), len(g)), pa.array(PARTS)
    )
    parts = pa.table(
        [
            np.repeat(shard, len(PARTS)),
            np.repeat(index, len(PARTS)),
            names,
            part_offsets.ravel(),
            sizes.ravel(),
            pa.nulls(part_offsets.size, pa.uint32()),  # no shard bytes behind this index: no checksums
        ],
        schema=PARTS_SCHEMA,
    )
    shard_ends = np.add.reduceat(sample_size, first)
    return samples, parts, shard_ends


def write_side_index(root: str, n: int, exclusions: int, seed: int = 1) -> None:
    """`.nv-meta` (info, split.yaml, dataset.yaml, index.uuid, arrow/*.parquet) of `n` samples under `root`."""
    if n % PER_SHARD:
        raise ValueError(f"n must be a multiple of {PER_SHARD}")
    meta = os.path.join(root, ".nv-meta")
    os.makedirs(os.path.join(meta, "arrow"))
    rng = np.random.default_rng(seed)
    all_ends, summaries = [], []
    with (
        pq.ParquetWriter(
            os.path.join(meta, "arrow", "samples.parquet"), SAMPLES_SCHEMA, **parquet_options(SAMPLES_SCHEMA)
        ) as ws,
        pq.ParquetWriter(
            os.path.join(meta, "arrow", "parts.parquet"), PARTS_SCHEMA, **parquet_options(PARTS_SCHEMA)
        ) as wp,
    ):
        for start in range(0, n, BLOCK):
            samples, parts, ends = _block(start, min(n, start + BLOCK), rng)
            ws.write_table(samples, row_group_size=1 << 22)
            wp.write_table(parts, row_group_size=1 << 22)
            summaries.append(summarize(parts))  # blocks hold whole shards
            all_ends.append(ends)
    ends = np.concatenate(all_ends)
    n_shards = len(ends)
    names = [f"shards/shard-{i:06d}.tar" for i in range(n_shards)]
    shards = pa.table(
        [np.arange(n_shards, dtype=np.int32), pa.array(names), np.full(n_shards, PER_SHARD, np.int64),
         ends + 1024, pa.nulls(n_shards, pa.float64()), pa.nulls(n_shards, pa.string()), ends,
         pa.nulls(n_shards, pa.string())],
        schema=SHARDS_SCHEMA,
    )  # fmt: skip
    pq.write_table(shards, os.path.join(meta, "arrow", "shards.parquet"), **parquet_options(shards.schema))
    summary = with_identity(pa.concat_tables(summaries), shards, n, n * len(PARTS))
    pq.write_table(summary, os.path.join(meta, "arrow", SUMMARY_FILE), **parquet_options(summary.schema))
    train, val = int(n_shards * 0.8), int(n_shards * 0.9)
    picked = np.sort(rng.choice(train * PER_SHARD, size=min(exclusions, train * PER_SHARD), replace=False))
    sample_entries = pc.binary_join_element_wise(
        pc.binary_join_element_wise("shards/shard-", _padded(picked // PER_SHARD, 6), ""),
        pc.binary_join_element_wise(_padded(picked // PER_SHARD, 6), _padded(picked % PER_SHARD, 6), "_"),
        ".tar/",
    ).to_pylist()
    whole = [names[i] for i in range(0, train, max(1, train // 10))][:10]
    split = {"train": names[:train], "val": names[train:val], "test": names[val:]}
    lines = ["split_parts:"]
    for name, entries in split.items():
        lines += [f"  {name}:"] + [f"  - {e}" for e in entries] if entries else [f"  {name}: []"]
    lines += ["exclude:"] + [f"- {e}" for e in whole + sample_entries]
    with open(os.path.join(meta, "split.yaml"), "w") as f:  # the block layout energon writes
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(meta, ".info.json"), "w") as f:
        json.dump({"energon_version": "7.4.1", "shard_counts": dict.fromkeys(names, PER_SHARD)}, f)
    with open(os.path.join(meta, "dataset.yaml"), "w") as f:
        f.write("__module__: megatron.energon\n__class__: CrudeWebdataset\n")
    with open(os.path.join(meta, "index.uuid"), "w") as f:
        f.write(f"00000000-0000-0000-0000-{seed:012d}")
