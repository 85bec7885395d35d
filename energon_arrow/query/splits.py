"""split.yaml as tables: which shard goes to which split in which order, and what `exclude` removes.

energon 7.4.1 semantics: split parts and exclude entries are brace-expanded; a split iterates its shards in
split.yaml order minus every shard named in `exclude`; an exclude entry `<shard path>/<sample key>` removes that one
sample (energon compares `f"{shard}/{key}"`, so keys are matched within their own shard).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

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
    whole, samples = config.classify_excludes(shard_paths)
    order = sorted(whole, key=shard_ids.__getitem__)
    paths, keys = list(order), [None] * len(order)
    for path, excluded_keys in samples.items():
        ordered = sorted(excluded_keys)
        paths += [path] * len(ordered)
        keys += ordered
    path_col = pa.array(paths, pa.string())
    key_col = pa.array(keys, pa.string())
    entry = pc.if_else(pc.is_null(key_col), path_col, pc.binary_join_element_wise(path_col, key_col, "/"))
    kind = pa.array(["shard"] * len(order) + ["sample"] * (len(paths) - len(order)), pa.string())
    # entries naming no shard of this dataset: reported by the `excluded` view, they match nothing
    placed = set(entry.to_pylist())
    unknown = [e for e in dict.fromkeys(expanded.exclude) if e not in placed]
    ids = pc.index_in(path_col, value_set=pa.array(shard_paths, pa.string())).cast(pa.int32())
    excludes = pa.Table.from_arrays(
        [pa.concat_arrays([entry, pa.array(unknown, pa.string())]),
         pa.concat_arrays([kind, pa.array(["unknown"] * len(unknown), pa.string())]),
         pa.concat_arrays([ids, pa.nulls(len(unknown), pa.int32())]),
         pa.concat_arrays([path_col, pa.nulls(len(unknown), pa.string())]),
         pa.concat_arrays([key_col, pa.nulls(len(unknown), pa.string())])],
        schema=EXCLUDES_SCHEMA,
    )  # fmt: skip
    return splits, excludes
