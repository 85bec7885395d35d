"""energon's metadataset loaders: `MetadatasetV2` (a YAML with `__class__: MetadatasetV2`) and the older v1
`Metadataset` (the default `__class__`), both what `load_dataset(<yaml>)` returns (`load_dataset`: here, it picks one of them or a `DatasetLoader`). They differ from a plain
`DatasetLoader` by `traverse` (the leaf datasets of a split) and `prepare` (writes the join indexes)."""

from __future__ import annotations

import os
from typing import Any

from energon_arrow.energon.wrappers.config import DatasetLoader, _is_metadataset


class Metadataset(DatasetLoader):
    """energon's v1 metadataset (`splits: {<split>: {datasets: [{weight, path, ...}]}}`), loaded from its YAML:
    `Metadataset(path, *, storage_options=None, trust_remote_code=False)`."""

    def traverse(self, mds_path: Any = None, *, split_part: str) -> list:
        from energon_arrow.energon.metadataset_api import traverse_metadataset

        return traverse_metadataset(self.path, split_part=split_part, storage_options=self.storage_options)

    def prepare(self, split_part: str | None = None) -> list:
        """Checks every split and writes the join indexes; returns the join index files (all splits: the
        check covers the whole file, so `split_part` only names the caller's interest, as in energon)."""
        from energon_arrow.energon.metadataset_api import prepare_metadataset

        return prepare_metadataset(self.path, self.storage_options)


class MetadatasetV2(Metadataset):
    """energon's metadataset v2 (`__class__: MetadatasetV2`: `path`, `blend`, `blend_epochized`, `join`, `subset`,
    `aux`, ...)."""


def metadataset_class(path: Any, storage_options: dict | None) -> type:
    """The loader class a metadataset YAML declares (energon's default `__class__` is the v1 `Metadataset`)."""
    from energon_arrow.metadataset.tree import MdsFile

    data = MdsFile(os.fspath(path) if isinstance(path, os.PathLike) else str(path), storage_options).data
    cls = data.get("__class__", "Metadataset") if isinstance(data, dict) else "Metadataset"
    return MetadatasetV2 if cls == "MetadatasetV2" else Metadataset


def load_dataset(path, **kwargs) -> DatasetLoader:
    """A (meta)dataset loader (energon's load_dataset): `get_datasets(training=, split_part=, worker_config=)`;
    a `MetadatasetV2` / `Metadataset` (by the YAML's `__class__`) for a metadataset, else a `DatasetLoader`."""
    if _is_metadataset(os.fspath(path) if isinstance(path, os.PathLike) else str(path)):
        return metadataset_class(path, kwargs.get("storage_options"))(path, **kwargs)
    return DatasetLoader(path, **kwargs)
