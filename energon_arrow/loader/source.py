"""A split of a prepared dataset as the loader sees it: the effective sample table plus the dataset config.

The table columns are numpy arrays (`shard_id`, `sample_index`, `byte_offset`, `byte_size`) in energon iteration
order; keys are kept as an Arrow array for lookups only (workers never need them: the tar headers carry the key).
Arrays built before the DataLoader forks its workers are shared copy-on-write, not copied into each worker.
"""

from __future__ import annotations

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

    def subset(self, start: int, end: int) -> SplitSource:
        """Rows [start, end) of the table (metadataset `subset` ranges)."""
        sl = slice(start, end)
        return SplitSource(
            self.storage,
            self.shard_paths,
            self.shard_id[sl],
            self.sample_index[sl],
            self.byte_offset[sl],
            self.byte_size[sl],
            None if self.keys is None else self.keys[start:end],
            self.config,
            self.subflavors,
            f"{self.name}[{start}:{end}]",
        )


def open_split(
    path: str | Storage,
    split: str = "train",
    storage_options: dict | None = None,
    subflavors: dict | None = None,
    dataset_yaml: str = "dataset.yaml",
    split_config: str = "split.yaml",
) -> SplitSource:
    """The effective sample table of `split` (exclusions applied, shards checked against the index) and the
    dataset.yaml of a prepared dataset, local or on S3."""
    from energon_arrow.meta import read_dataset_yaml
    from energon_arrow.query import open_dataset

    storage = path if isinstance(path, Storage) else open_storage(path, storage_options)
    with open_dataset(storage, split_config=split_config) as ds:
        table = ds.split(split)
    config = read_dataset_yaml(storage, dataset_yaml)
    return SplitSource.from_table(storage, table, config, subflavors, f"{storage.url} split {split!r}")
