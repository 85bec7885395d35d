"""split.yaml as tables: which shard goes to which split in which order, and what `exclude` removes.

energon 7.4.1 semantics: split parts and exclude entries are brace-expanded; a split iterates its shards in
split.yaml order minus every shard named in `exclude`; an exclude entry `<shard path>/<sample key>` removes that one
sample (energon compares `f"{shard}/{key}"`, so keys are matched within their own shard).
"""

from __future__ import annotations

import numpy as np
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
    expanded = config.expanded()
    shards = pa.array(shard_paths, pa.string())
    names = list(expanded.split_parts)
    lengths = np.array([len(expanded.split_parts[n]) for n in names], np.int64)
    paths = pa.array([p for n in names for p in expanded.split_parts[n]], pa.string())
    ids = pc.index_in(paths, value_set=shards)
    if ids.null_count:
        i = int(pc.index(pc.is_null(ids), True).as_py())
        split = names[int(np.searchsorted(np.cumsum(lengths), i, side="right"))]
        raise MetaError(
            f"{where}: split {split!r} names shard {paths[i].as_py()!r}, which is not in .nv-meta/.info.json "
            f"({len(shard_paths)} shards)"
        )
    starts = np.cumsum(lengths) - lengths
    position = np.arange(len(paths), dtype=np.int64) - np.repeat(starts, lengths)
    split_col = pa.DictionaryArray.from_arrays(
        pa.array(np.repeat(np.arange(len(names), dtype=np.int32), lengths)), pa.array(names, pa.string())
    ).cast(pa.string())
    excluded = pc.is_in(paths, value_set=pa.array(expanded.exclude, pa.string()))
    splits = pa.Table.from_arrays(
        [split_col, pa.array(position.astype(np.int32)), ids.cast(pa.int32()), paths, excluded],
        schema=SPLITS_SCHEMA,
    )
    excludes = exclude_table(expanded.exclude, shard_paths)
    return splits, excludes


def exclude_table(entries: list[str], shard_paths: list[str]) -> pa.Table:
    """Expanded `exclude` entries as rows (EXCLUDES_SCHEMA, duplicates once): whole shards by shard id, then
    samples by shard id and key, then entries naming no shard (in their order). Vectorised: entries that are a
    shard, or a shard and a key without `/`, are classified by Arrow kernels; the rest (keys with `/`, unknown
    entries) by `SplitConfig.classify_excludes`, one by one."""
    shards = pa.array(shard_paths, pa.string())
    values = pa.array(entries, pa.string())
    whole = pc.is_in(values, value_set=shards)
    cut = pc.split_pattern(values, "/", max_splits=1, reverse=True)
    has_cut = pc.equal(pc.list_value_length(cut), 2)
    prefix = pc.if_else(has_cut, pc.list_element(cut, 0), pa.scalar(None, pa.string()))
    key = pc.list_element(cut, 1)
    sample = pc.and_(pc.invert(whole), pc.fill_null(pc.is_in(prefix, value_set=shards), False))
    rest = pc.filter(values, pc.invert(pc.or_(whole, sample))).to_pylist()
    _, more = SplitConfig({}, rest).classify_excludes(shard_paths) if rest else (set(), {})
    more_paths = [p for p, keys in more.items() for _ in keys]
    more_keys = [k for keys in more.values() for k in keys]
    paths = pa.concat_arrays(
        [pc.filter(values, whole), pc.filter(prefix, sample), pa.array(more_paths, pa.string())]
    )
    keys = pa.concat_arrays(
        [
            pa.nulls(pc.sum(whole).as_py() or 0, pa.string()),
            pc.filter(key, sample),
            pa.array(more_keys, pa.string()),
        ]
    )
    ids = pc.index_in(paths, value_set=shards).cast(pa.int32())
    rows = pa.table({"path": paths, "sample_key": keys, "shard_id": ids, "is_sample": pc.is_valid(keys)})
    rows = rows.sort_by([("is_sample", "ascending"), ("shard_id", "ascending"), ("sample_key", "ascending")])
    ids, paths, keys = (rows.column(c).combine_chunks() for c in ("shard_id", "path", "sample_key"))
    if len(rows) > 1:  # the same entry more than once: one row
        same = pc.and_(
            pc.equal(ids.slice(1), ids.slice(0, len(ids) - 1)),
            pc.fill_null(pc.equal(keys.slice(1), keys.slice(0, len(keys) - 1)), True),
        )
        keep = pa.concat_arrays([pa.array([True]), pc.invert(same)])
        ids, paths, keys = (pc.filter(c, keep) for c in (ids, paths, keys))
    kind = pc.if_else(pc.is_null(keys), "shard", "sample")
    entry = pc.if_else(pc.is_null(keys), paths, pc.binary_join_element_wise(paths, keys, "/"))
    # entries naming no shard of this dataset: reported by the `excluded` view, they match nothing
    placed = {f"{p}/{k}" for p, keys_ in more.items() for k in keys_}
    unknown = pa.array([e for e in dict.fromkeys(rest) if e not in placed], pa.string())
    n = len(unknown)
    return pa.Table.from_arrays(
        [pa.concat_arrays([entry, unknown]),
         pa.concat_arrays([kind, pa.array(["unknown"] * n, pa.string())]),
         pa.concat_arrays([ids, pa.nulls(n, pa.int32())]),
         pa.concat_arrays([paths, pa.nulls(n, pa.string())]),
         pa.concat_arrays([keys, pa.nulls(n, pa.string())])],
        schema=EXCLUDES_SCHEMA,
    )  # fmt: skip
