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
from energon_arrow.tar.arrow import from_numpy

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
    excludes = exclude_table(expanded.exclude, shard_paths)
    whole = excludes.filter(pc.equal(excludes.column("kind"), "shard")).column("shard_id")
    excluded = pc.is_in(ids, value_set=whole.combine_chunks().cast(ids.type))
    splits = pa.Table.from_arrays(
        [split_col, pa.array(position.astype(np.int32)), ids.cast(pa.int32()), paths, excluded],
        schema=SPLITS_SCHEMA,
    )
    return splits, excludes


def exclude_table(entries: list[str], shard_paths: list[str]) -> pa.Table:
    """Expanded `exclude` entries as rows (EXCLUDES_SCHEMA, duplicates once): whole shards by shard id, then
    samples by shard id and key, then entries naming no shard (in their order). Vectorised: entries that are a
    shard, or a shard and a key without `/`, are classified by Arrow kernels (an entry of the second kind is its
    shard path, `/` and its key, so it is its own `entry`); the rest (keys with `/`, unknown entries) by
    `SplitConfig.classify_excludes`, one by one."""
    shards = pa.array(shard_paths, pa.string())
    values = pa.array(entries, pa.string())
    whole = pc.is_in(values, value_set=shards)
    cut = pc.split_pattern(values, "/", max_splits=1, reverse=True)
    # the part before the last `/` (an entry without one: itself, which is a shard only when `whole`)
    sample = pc.and_(pc.invert(whole), pc.is_in(pc.list_element(cut, 0), value_set=shards))
    rest = pc.filter(values, pc.invert(pc.or_(whole, sample))).to_pylist()
    _, more = SplitConfig({}, rest).classify_excludes(shard_paths) if rest else (set(), {})
    cut = pc.filter(cut, sample)
    more_paths = [p for p, keys in more.items() for _ in keys]
    more_keys = [k for keys in more.values() for k in keys]
    shard_rows = pc.unique(pc.index_in(pc.filter(values, whole), value_set=shards)).cast(pa.int32())
    sample_ids = pc.index_in(
        pa.concat_arrays([pc.list_element(cut, 0), pa.array(more_paths, pa.string())]), value_set=shards
    ).cast(pa.int32())
    sample_keys = pa.concat_arrays([pc.list_element(cut, 1), pa.array(more_keys, pa.string())])
    sample_entries = pa.concat_arrays(
        [
            pc.filter(values, sample),
            pa.array([f"{p}/{k}" for p, k in zip(more_paths, more_keys)], pa.string()),
        ]
    )
    order = pc.sort_indices(
        pa.table({"id": sample_ids, "key": sample_keys}), [("id", "ascending"), ("key", "ascending")]
    )
    sample_ids, sample_keys, sample_entries = (
        a.take(order) for a in (sample_ids, sample_keys, sample_entries)
    )
    if len(sample_ids) > 1:  # the same entry more than once: one row
        same = pc.and_(
            pc.equal(sample_ids.slice(1), sample_ids.slice(0, len(sample_ids) - 1)),
            pc.equal(sample_keys.slice(1), sample_keys.slice(0, len(sample_keys) - 1)),
        )
        keep = pa.concat_arrays([pa.array([True]), pc.invert(same)])
        sample_ids, sample_keys, sample_entries = (
            pc.filter(a, keep) for a in (sample_ids, sample_keys, sample_entries)
        )
    shard_rows = shard_rows.take(pc.sort_indices(shard_rows))
    # entries naming no shard of this dataset: reported by the `excluded` view, they match nothing
    placed = {f"{p}/{k}" for p, keys_ in more.items() for k in keys_}
    unknown = pa.array([e for e in dict.fromkeys(rest) if e not in placed], pa.string())
    n, w, m = len(unknown), len(shard_rows), len(sample_ids)
    ids = pa.concat_arrays([shard_rows, sample_ids, pa.nulls(n, pa.int32())])
    return pa.Table.from_arrays(
        [pa.concat_arrays([shards.take(shard_rows), sample_entries, unknown]),
         pa.DictionaryArray.from_arrays(from_numpy(np.repeat(np.arange(3, dtype=np.int32), [w, m, n]), np.int32),
                                        pa.array(["shard", "sample", "unknown"])).cast(pa.string()),
         ids,
         pa.concat_arrays([shards.take(ids.slice(0, w + m)), pa.nulls(n, pa.string())]),
         pa.concat_arrays([pa.nulls(w, pa.string()), sample_keys, pa.nulls(n, pa.string())])],
        schema=EXCLUDES_SCHEMA,
    )  # fmt: skip
