"""Index-only synthetic datasets of any size: one real template shard, hard-linked as every shard.

`write_scale_dataset(root, shards, per_shard)` prepares one small shard (in `<root>.template`), links it as
`shards/shard-NNNNNN.tar` for every shard (no data copied: a 100M-sample dataset costs its index only) and writes
`.nv-meta` (.info.json, split.yaml, dataset.yaml, index.uuid) and the Parquet side index by tiling the template's
rows, record batch by record batch (bounded memory). Every shard is real and readable, with the same content, so
the loader opens, verifies and reads it like any prepared dataset. For tests and benchmarks at scale.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from energon_arrow.index.schema import PARTS_SCHEMA, SAMPLES_SCHEMA, SHARDS_SCHEMA, SIDE_INDEX_DIR

_SHARDS_PER_BATCH = 256


def _template(root: str, per_shard: int, image_bytes: int) -> str:
    from energon_arrow.index.prepare import PrepareOptions, prepare_dataset
    from energon_arrow.meta import field_map_dataset, parse_split_ratio
    from energon_arrow.testing.synthetic import write_webdataset

    tpl = root.rstrip("/") + ".template"  # beside the dataset: no prepare or listing of it sees the template
    shutil.rmtree(tpl, ignore_errors=True)
    write_webdataset(tpl, shards=1, samples_per_shard=per_shard, image_bytes=image_bytes)
    options = PrepareOptions(
        split_ratio=parse_split_ratio("1,0,0"),
        dataset_yaml=field_map_dataset("CaptioningSample", {"image": "jpg", "caption": "txt"}),
        num_workers=1,
    )
    prepare_dataset(tpl, options)
    return tpl


def link_shards(
    root: str, shards: int, per_shard: int = 1000, image_bytes: int = 64
) -> tuple[str, list[str]]:
    """Prepare the template shard and hard-link it as `shards/shard-NNNNNN.tar` for every shard (a dataset to
    run a real prepare on). Returns (the template dataset's folder, the shard paths)."""
    os.makedirs(os.path.join(root, "shards"), exist_ok=True)
    tpl = _template(root, per_shard, image_bytes)
    tpl_shard = os.path.join(tpl, "shards", "shard-000000.tar")
    paths = [f"shards/shard-{s:06d}.tar" for s in range(shards)]
    for rel in paths:
        dst = os.path.join(root, rel)
        if not os.path.exists(dst):
            os.link(tpl_shard, dst)
    return tpl, paths


def write_scale_dataset(
    root: str, shards: int, per_shard: int = 1000, image_bytes: int = 64, split: dict | None = None
) -> str:
    """Write the index-only dataset (see the module docstring) at `root`; `split`: split.yaml as a dict
    (default: every shard in `train`). Returns root."""
    tpl, paths = link_shards(root, shards, per_shard, image_bytes)
    side = os.path.join(tpl, SIDE_INDEX_DIR)
    meta = os.path.join(root, ".nv-meta")
    arrow = os.path.join(root, SIDE_INDEX_DIR)
    os.makedirs(arrow, exist_ok=True)
    shard_row = pq.read_table(os.path.join(side, "shards.parquet"))
    metadata = shard_row.schema.metadata
    n = len(paths)
    shard_table = pa.table(
        {
            "shard_id": pa.array(np.arange(n, dtype=np.int32)),
            "path": pa.array(paths),
            **{
                c: pa.repeat(shard_row[c][0], n) for c in SHARDS_SCHEMA.names if c not in ("shard_id", "path")
            },
        }
    )
    shard_table = shard_table.cast(SHARDS_SCHEMA).replace_schema_metadata(metadata)
    pq.write_table(shard_table, os.path.join(arrow, "shards.parquet"))
    for name, schema in (("samples", SAMPLES_SCHEMA), ("parts", PARTS_SCHEMA)):
        _tile(
            pq.read_table(os.path.join(side, f"{name}.parquet")),
            schema.with_metadata(
                metadata
            ),  # the shards table's: the files of one side index (schema.SET_KEY)
            n,
            os.path.join(arrow, f"{name}.parquet"),
        )
    for f in ("index.uuid", "dataset.yaml"):
        shutil.copy(os.path.join(tpl, ".nv-meta", f), os.path.join(meta, f))
    with open(os.path.join(meta, ".info.json"), "w") as f:
        json.dump({"energon_version": "7.4.1", "shard_counts": {p: per_shard for p in paths}}, f)
    last = f"{n - 1:06d}"
    split = split or {"split_parts": {"train": ["shards/shard-{000000.." + last + "}.tar"]}, "exclude": []}
    import yaml

    with open(os.path.join(meta, "split.yaml"), "w") as f:
        yaml.safe_dump(split, f)
    return root


def _tile(template: pa.Table, schema: pa.Schema, shards: int, path: str) -> None:
    """The template shard's rows repeated for shard ids 0..shards-1, written in batches of shards."""
    template = template.cast(schema)
    with pq.ParquetWriter(path, schema) as writer:
        for lo in range(0, shards, _SHARDS_PER_BATCH):
            hi = min(shards, lo + _SHARDS_PER_BATCH)
            reps = hi - lo
            idx = np.tile(np.arange(template.num_rows), reps)
            block = template.take(pa.array(idx))
            ids = np.repeat(np.arange(lo, hi, dtype=np.int32), template.num_rows)
            writer.write_table(
                block.set_column(0, schema.field("shard_id"), pa.array(ids)), row_group_size=1 << 20
            )
