"""A split of a prepared dataset as the loader sees it: the effective sample table plus the dataset config.

The table columns are numpy arrays (`shard_id`, `sample_index`, `byte_offset`, `byte_size`) in energon iteration
order; keys are an Arrow array. `parts` maps each part name to two int64 arrays over the rows: the payload's
offset relative to the sample's byte_offset (-1 when the sample lacks that part) and its size, so workers slice
payloads out of the fetched sample bytes without parsing tar headers.
Arrays built before the DataLoader forks its workers are shared copy-on-write, not copied into each worker.
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import shutil
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from energon_arrow.adapters import Storage, open_storage
from energon_arrow.loader.errors import LoaderError
from energon_arrow.meta import DatasetYaml

_SHARD_PATH_COLUMNS = ("shard_path", "shard", "path")


@dataclass
class SplitSource:
    storage: Storage
    shard_paths: list[str]
    shard_id: np.ndarray
    sample_index: np.ndarray
    byte_offset: np.ndarray
    byte_size: np.ndarray
    keys: pa.Array | None = None
    config: DatasetYaml = field(default_factory=DatasetYaml)
    subflavors: dict | None = None
    name: str = ""  # for messages: dataset URL + split
    aux: dict = field(default_factory=dict)  # name -> file store handed to cookers (metadataset `aux:`)
    parts: dict[str, tuple[np.ndarray, np.ndarray]] | None = None
    _key_maps: list = field(default_factory=list)  # memory maps behind `keys` (see map_index)
    builder: Any = None  # the SampleBuilder class for this source (None: SampleBuilder; JSONL has its own)

    def __len__(self) -> int:
        return len(self.shard_id)

    @classmethod
    def from_table(
        cls,
        storage: Storage,
        table: Any,
        config: DatasetYaml | None = None,
        subflavors: dict | None = None,
        name: str = "",
    ) -> SplitSource:
        """Build from an Arrow table / polars frame with shard_id, a shard path column, sample_index,
        sample_key, byte_offset, byte_size (the query layer's effective split table)."""
        if not isinstance(table, pa.Table):
            table = table.to_arrow() if hasattr(table, "to_arrow") else pa.table(table)
        cols = set(table.column_names)
        path_col = next((c for c in _SHARD_PATH_COLUMNS if c in cols), None)
        missing = [c for c in ("shard_id", "sample_index", "byte_offset", "byte_size") if c not in cols]
        if missing or path_col is None:
            raise LoaderError(
                f"{name}: sample table lacks columns {missing or ['shard_path']} (has {sorted(cols)})"
            )
        shard_id = table["shard_id"].to_numpy().astype(np.int32, copy=False)
        paths: dict[int, str] = {}
        if len(table):
            pairs = (
                pa.table({"i": table["shard_id"], "p": table[path_col]}).group_by(["i", "p"]).aggregate([])
            )
            for i, p in zip(pairs["i"].to_pylist(), pairs["p"].to_pylist()):
                if paths.setdefault(i, p) != p:
                    raise LoaderError(f"{name}: shard id {i} maps to two paths {paths[i]!r} and {p!r}")
        # Dense renumbering: workers index shard_paths by position.
        ids = sorted(paths)
        remap = np.zeros(max(ids) + 1 if ids else 1, np.int32)
        remap[ids] = np.arange(len(ids), dtype=np.int32)
        return cls(
            storage=storage,
            shard_paths=[paths[i] for i in ids],
            shard_id=remap[shard_id] if len(shard_id) else shard_id,
            sample_index=table["sample_index"].to_numpy().astype(np.int64, copy=False),
            byte_offset=table["byte_offset"].to_numpy().astype(np.int64, copy=False),
            byte_size=table["byte_size"].to_numpy().astype(np.int64, copy=False),
            keys=table["sample_key"].combine_chunks() if "sample_key" in cols else None,
            config=config or DatasetYaml(),
            subflavors=subflavors,
            name=name,
        )

    def release_pages(self) -> None:
        """Drop this process's mappings of index pages it touched (they stay in the page cache), so a long
        running worker's resident set stays bounded; the next access maps them again."""
        maps = {
            id(m): m for a in [self.shard_id, *self._key_maps] if (m := getattr(a, "_mmap", None)) is not None
        }
        for m in maps.values():
            m.madvise(mmap.MADV_DONTNEED)

    def subset(self, start: int, end: int) -> SplitSource:
        """Rows [start, end) of the table (metadataset `subset` ranges)."""
        sl = slice(start, end)
        return dataclasses.replace(
            self,
            shard_id=self.shard_id[sl],
            sample_index=self.sample_index[sl],
            byte_offset=self.byte_offset[sl],
            byte_size=self.byte_size[sl],
            keys=None if self.keys is None else self.keys[start:end],
            name=f"{self.name}[{start}:{end}]",
            parts=None if self.parts is None else {k: (o[sl], z[sl]) for k, (o, z) in self.parts.items()},
        )  # the rest is shared, the key maps too (release_pages)


def open_split(
    path: str | Storage,
    split: str = "train",
    storage_options: dict | None = None,
    subflavors: dict | None = None,
    dataset_yaml: str = "dataset.yaml",
    split_config: str = "split.yaml",
    verify: bool = True,
) -> SplitSource:
    """The effective sample table of `split` (exclusions applied, shards checked against the index) and the
    dataset.yaml of a prepared dataset, local or on S3."""
    from energon_arrow.meta import read_dataset_yaml
    from energon_arrow.query import open_dataset

    storage = path if isinstance(path, Storage) else open_storage(path, storage_options)
    with open_dataset(storage, split_config=split_config, verify=verify) as ds:
        table = ds.split(split)
        parts = ds.sql(_PARTS_SQL, [split]).arrow()
    config = read_dataset_yaml(storage, dataset_yaml)
    src = SplitSource.from_table(storage, table, config, subflavors, f"{storage.url} split {split!r}")
    src.parts = part_layout(parts, len(src))
    del table, parts
    return map_index(src)


def map_index(src: SplitSource) -> SplitSource:
    """Move the index arrays into memory-mapped files (unlinked at once; the mappings stay valid), so the
    DataLoader workers forked later map the same page-cache pages instead of inheriting private copies, and a
    worker's resident memory does not grow with the dataset."""
    from energon_arrow.adapters.publish import private_mkdtemp

    folder = private_mkdtemp("energon-arrow-index-")
    try:

        def mapped(name: str, arr: np.ndarray) -> np.ndarray:
            path = os.path.join(folder, f"{name}.npy")
            np.save(path, np.ascontiguousarray(arr))
            return np.load(path, mmap_mode="r")

        # one row-major table: a batch's rows touch one region of one mapping, not one per column
        parts = list((src.parts or {}).items())
        columns = [src.shard_id, src.sample_index, src.byte_offset, src.byte_size]
        columns += [c for _, pair in parts for c in pair]
        table = mapped("rows", np.stack([np.asarray(c, np.int64) for c in columns], axis=1))
        src.shard_id, src.sample_index, src.byte_offset, src.byte_size = (table[:, i] for i in range(4))
        if src.parts is not None:
            src.parts = {k: (table[:, 4 + 2 * i], table[:, 5 + 2 * i]) for i, (k, _) in enumerate(parts)}
        if src.keys is not None:
            keys = src.keys.cast(pa.large_string()) if pa.types.is_string(src.keys.type) else src.keys
            keys = pa.concat_arrays([keys])  # offset 0, no nulls
            _, offsets, data = keys.buffers()
            off = mapped("key_offsets", np.frombuffer(offsets, np.int64, len(keys) + 1))
            chars = mapped(
                "key_data", np.frombuffer(data, np.uint8, int(off[-1])) if data else np.zeros(0, np.uint8)
            )
            src.keys = pa.LargeStringArray.from_buffers(len(keys), pa.py_buffer(off), pa.py_buffer(chars))
            src._key_maps = [off, chars]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    pa.default_memory_pool().release_unused()
    _trim_heap()
    return src


def _trim_heap() -> None:
    """Return the freed parts of the C heap (left by building the index) to the OS before workers fork, so the
    workers' allocations do not copy-on-write stale parent heap pages."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


# Every part of the split's samples with the row of its sample in `split(name)` order (same ORDER BY).
_PARTS_SQL = """
    WITH s AS (SELECT shard_id, sample_index, byte_offset,
                      row_number() OVER (ORDER BY shard_position, sample_index) - 1 AS row
               FROM split_samples WHERE split = ?)
    SELECT s.row, p.part_name::VARCHAR AS part_name, p.content_offset - s.byte_offset AS rel, p.content_size AS size
    FROM s JOIN parts p USING (shard_id, sample_index)"""


def part_layout(parts: pa.Table, n: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Pivot (row, part_name, rel, size) rows into per-part-name offset / size arrays over n sample rows."""
    row = parts["row"].to_numpy()
    rel = parts["rel"].to_numpy().astype(np.int64, copy=False)
    size = parts["size"].to_numpy().astype(np.int64, copy=False)
    names = parts["part_name"].dictionary_encode().combine_chunks()
    codes = names.indices.to_numpy(zero_copy_only=False)
    out = {}
    for code, name in enumerate(names.dictionary.to_pylist()):
        m = codes == code
        off = np.full(n, -1, np.int64)
        sz = np.zeros(n, np.int64)
        off[row[m]] = rel[m]
        sz[row[m]] = size[m]
        out[name] = (off, sz)
    return out
