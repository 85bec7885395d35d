"""energon's dataset-building entry points: `get_dataset_from_config` (a factory whose `build()` is the
per-worker core dataset) and `DatasetLoader` (what `load_dataset` returns for a dataset folder, metadatasets.py:
`get_datasets()` lists factories with their blend weights / repetitions)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from enum import Enum

from energon_arrow.energon.wrappers.factory_base import DatasetLoaderInterface
from energon_arrow.energon.wrappers.webdataset_factory import WebdatasetFactory, _options
from energon_arrow.loader.errors import LoaderError
from energon_arrow.loader.source import SplitSource, open_split


def _factory(source: SplitSource, training: bool, worker_config, options: dict) -> WebdatasetFactory:
    from energon_arrow.energon.wrappers.factories import factory_class

    sample_type = options["sample_type"]
    cls = factory_class(source)
    factory = cls.__new__(cls)
    WebdatasetFactory.__init__(
        factory,
        source,
        training=training,
        worker_config=worker_config,
        decoder=options["decoder"],
        max_samples_per_sequence=options["max_samples_per_sequence"],
        trust_remote_code=options["trust_remote_code"],
    )
    if sample_type is not None and not issubclass(factory.__sample_type__, sample_type):
        raise LoaderError(
            f"{source.name}: samples are {factory.__sample_type__.__name__}, not a subclass of "
            f"{sample_type.__name__}"
        )
    return factory


def _is_metadataset(path: str) -> bool:
    return str(path).endswith((".yaml", ".yml"))


def get_dataset_from_config(
    path,
    *,
    dataset_config: str | None = None,
    split_config: str | None = None,
    split_part: str | None = None,
    training: bool = True,
    subflavors: dict | None = None,
    worker_config,
    storage_options: dict | None = None,
    **options,
) -> WebdatasetFactory:
    """The factory of split `split_part` (default "train") of the prepared dataset at `path` (energon's
    get_dataset_from_config; `options`: sample_type, shuffle_over_epochs, parallel_shard_iters,
    max_samples_per_sequence, decoder, trust_remote_code)."""
    checked = _options(**options)
    path = os.fspath(path) if isinstance(path, os.PathLike) else path
    if _is_metadataset(str(path)):
        raise LoaderError(f"{path}: is a metadataset; use load_dataset(path).get_datasets(...)")
    if str(path).endswith(".jsonl"):
        raise LoaderError(f"{path}: crude JSONL datasets are not supported by get_dataset_from_config yet")
    source = open_split(
        path,
        split_part or "train",
        storage_options,
        subflavors,
        dataset_yaml=dataset_config or "dataset.yaml",
        split_config=split_config or "split.yaml",
    )
    return _factory(source, training, worker_config, checked)


def metadataset_sources(
    path: str, split_part: str, subflavors: dict | None, storage_options: dict | None
) -> tuple[str, list[tuple[SplitSource, float, float]]]:
    """(mode, [(source, weight, repetitions)]) of a metadataset split: subsets, subflavors and aux applied.
    mode: "single", "blend" or "blend_epochized"."""
    from energon_arrow.energon.metadataset_sources import open_leaf
    from energon_arrow.metadataset.tree import resolve_split

    resolved = resolve_split(path, split_part, subflavors, storage_options)
    mode = {"none": "single", "weight": "blend", "repetitions": "blend_epochized"}[resolved.mode]
    return mode, [
        (
            open_leaf(leaf, storage_options),
            1.0 if leaf.weight is None else leaf.weight,
            1.0 if leaf.repetitions is None else leaf.repetitions,
        )
        for leaf in resolved.leaves
    ]


# ---- load_dataset ------------------------------------------------------------------------------------------
class DatasetBlendMode(Enum):
    NONE = "none"
    DATASET_WEIGHT = "dataset_weight"
    SAMPLE_REPETITIONS = "sample_repetitions"


@dataclass
class LoadedDataset:
    dataset: WebdatasetFactory
    weight: float | None = None
    repetitions: float | None = None
    aux: dict | None = None


@dataclass
class LoadedDatasetList:
    datasets: list[LoadedDataset] = field(default_factory=list)
    blend_mode: DatasetBlendMode = DatasetBlendMode.NONE


_MODES = {
    "single": DatasetBlendMode.NONE,
    "blend": DatasetBlendMode.DATASET_WEIGHT,
    "blend_epochized": DatasetBlendMode.SAMPLE_REPETITIONS,
}


class DatasetLoader(DatasetLoaderInterface):
    """energon's loader of a prepared dataset path (what `load_dataset` returns for a dataset; for a metadataset
    YAML it returns a `Metadataset` / `MetadatasetV2`, see `metadatasets`)."""

    def __init__(
        self,
        path,
        *,
        split_part: str | None = None,
        dataset_config: str | None = None,
        split_config: str | None = None,
        storage_options: dict | None = None,
        trust_remote_code: bool = False,
    ):
        """energon's fields: `split_part` replaces get_datasets' one; `dataset_config` / `split_config` are its
        defaults (other file names under the dataset's .nv-meta)."""
        self.path = os.fspath(path) if isinstance(path, os.PathLike) else str(path)
        self.split_part, self.dataset_config, self.split_config = split_part, dataset_config, split_config
        self.storage_options = storage_options
        self.trust_remote_code = trust_remote_code

    def post_initialize(self, mds_path=None) -> None:
        return None

    def get_datasets(
        self,
        *,
        training: bool,
        split_part: str | None = None,
        worker_config,
        subflavors: dict | None = None,
        shuffle_over_epochs_multiplier: int | None = 1,
        **kwargs,
    ) -> LoadedDatasetList:
        if self.split_part is not None:  # energon: the loader's own split part wins
            split_part = self.split_part
        if split_part is None:
            raise LoaderError(
                f"{self.path}: get_datasets needs a split_part (none given to load_dataset either)"
            )
        for name in ("dataset_config", "split_config"):
            if kwargs.get(name) is None and getattr(self, name) is not None:
                kwargs[name] = getattr(self, name)
        if shuffle_over_epochs_multiplier not in (1, None):
            raise LoaderError(
                f"shuffle_over_epochs_multiplier={shuffle_over_epochs_multiplier} is not supported "
                "(each training epoch is one permutation)"
            )
        if not _is_metadataset(self.path):
            factory = get_dataset_from_config(
                self.path,
                split_part=split_part,
                training=training,
                worker_config=worker_config,
                subflavors=subflavors,
                storage_options=self.storage_options,
                trust_remote_code=self.trust_remote_code,
                **kwargs,
            )
            return LoadedDatasetList([LoadedDataset(factory)], DatasetBlendMode.NONE)
        options = _options(trust_remote_code=self.trust_remote_code, **kwargs)
        mode, sources = metadataset_sources(self.path, split_part, subflavors, self.storage_options)
        out = [
            LoadedDataset(
                _factory(src, training, worker_config, options),
                weight=weight if mode == "blend" else None,
                repetitions=repetitions if mode == "blend_epochized" else None,
                aux=src.aux or None,
            )
            for src, weight, repetitions in sources
        ]
        return LoadedDatasetList(out, _MODES[mode])
