"""split.yaml as tables: which shard goes to which split in which order, and what `exclude` removes.

energon 7.4.1 semantics: split parts and exclude entries are brace-expanded; a split iterates its shards in
split.yaml order minus every shard named in `exclude`; an exclude entry `<shard path>/<sample key>` removes that one
sample (energon compares `f"{shard}/{key}"`, so keys are matched within their own shard).
"""

from __future__ import annotations

import pyarrow as pa

from energon_arrow.meta.errors import MetaError
from energon_arrow.meta.split import SplitConfig

SPLITS_SCHEMA = pa.schema(
    [
        pa.field("split", pa.string(), nullable=False),
        pa.field("position", pa.int32(), nullable=False),  # place of the shard in the split's list
        pa.field("shard_id", pa.int32(), nullable=False),
        pa.field("path", pa.string(), nullable=False),
        pa.field("excluded", pa.bool_(), nullable=False),  # the whole shard is in `exclude`
    ]
)

EXCLUDES_SCHEMA = pa.schema(
    [
        pa.field("entry", pa.string(), nullable=False),  # the expanded exclude entry
        pa.field("kind", pa.string(), nullable=False),  # "shard", "sample" or "unknown" (no such shard)
        pa.field("shard_id", pa.int32()),  # null when the entry names no shard of the dataset
        pa.field("path", pa.string()),
        pa.field("sample_key", pa.string()),  # for kind "sample"
    ]
)


def split_tables(config: SplitConfig, shard_paths: list[str], where: str) -> tuple[pa.Table, pa.Table]:
    """(splits, excludes) tables for a split config over the dataset's shards (in .info.json order)."""
    shard_ids = {p: i for i, p in enumerate(shard_paths)}
    expanded = config.expanded()
    excluded = set(expanded.exclude)
    rows: dict[str, list] = {name: [] for name in SPLITS_SCHEMA.names}
    for split, entries in expanded.split_parts.items():
        for position, path in enumerate(entries):
            if path not in shard_ids:
                raise MetaError(
                    f"{where}: split {split!r} names shard {path!r}, which is not in .nv-meta/.info.json "
                    f"({len(shard_paths)} shards)"
                )
            for name, value in zip(
                SPLITS_SCHEMA.names, (split, position, shard_ids[path], path, path in excluded)
            ):
                rows[name].append(value)
    splits = pa.Table.from_pydict(rows, schema=SPLITS_SCHEMA)
    ex_rows: dict[str, list] = {name: [] for name in EXCLUDES_SCHEMA.names}

    def add(entry, kind, path, key):
        for name, value in zip(EXCLUDES_SCHEMA.names, (entry, kind, shard_ids.get(path), path, key)):
            ex_rows[name].append(value)

    whole = config.excluded_shards(shard_paths)
    by_shard = config.excluded_samples(shard_paths)
    placed = set(whole)
    for path in sorted(whole, key=shard_ids.__getitem__):
        add(path, "shard", path, None)
    for path, keys in by_shard.items():
        for key in sorted(keys):
            add(f"{path}/{key}", "sample", path, key)
            placed.add(f"{path}/{key}")
    for entry in dict.fromkeys(e for e in expanded.exclude if e not in placed):
        add(entry, "unknown", None, None)  # names no shard of this dataset: reported, matches nothing
    return splits, pa.Table.from_pydict(ex_rows, schema=EXCLUDES_SCHEMA)
