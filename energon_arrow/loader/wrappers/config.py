"""energon's dataset-building entry points: `get_dataset_from_config` (a factory whose `build()` is the
per-worker core dataset) and `load_dataset` (a (meta)dataset loader whose `get_datasets()` lists factories with
their blend weights / repetitions)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from energon_arrow.loader.builder import SampleBuilder
from energon_arrow.loader.errors import LoaderError
from energon_arrow.loader.source import SplitSource, open_split
from energon_arrow.loader.wrappers.core import SampleDataset
from energon_arrow.loader.wrappers.factory_base import BaseCoreDatasetFactory, DatasetLoaderInterface
from energon_arrow.samples.decoders import PartDecoder

_DEFAULT_DECODER = object()  # energon's default: SampleDecoder()


def dataset_paths(source: SplitSource) -> list:
    """energon's `factory.paths`: the dataset folder as an `EPath` (a JSONL dataset: its `.jsonl` file; a join:
    each joined dataset's folder, in join order)."""
    from energon_arrow.epathlib import EPath
    from energon_arrow.loader.jsonl_source import JsonlBuilder

    if source.builder is JsonlBuilder:
        return [EPath(source.storage.url_of(source.shard_paths[0]))]
    members = getattr(source.builder, "keywords", {}).get("members")  # a join's functools.partial
    storages = [source.storage] + [member.storage for member, _rows in members or ()]
    return [EPath(storage.url) for storage in storages]


class WebdatasetFactory(BaseCoreDatasetFactory):
    """energon's dataset factory for one split: `len()` is the split's sample count over all ranks, `build()`
    the core dataset of the calling worker."""

    def __init__(
        self,
        source: SplitSource,
        *,
        training: bool,
        worker_config,
        decoder: Any = _DEFAULT_DECODER,
        max_samples_per_sequence: int | None = None,
        trust_remote_code: bool = False,
    ):
        if worker_config is None:
            raise LoaderError("worker_config is required (WorkerConfig(rank, world_size, num_workers))")
        if decoder is _DEFAULT_DECODER:
            decoder = PartDecoder()
        elif decoder is None:
            decoder = PartDecoder(raw=True)
        elif not isinstance(decoder, PartDecoder):
            raise LoaderError(
                f"decoder must be an energon_arrow SampleDecoder / PartDecoder or None, got {decoder!r}"
            )
        self.source = source
        self.training = training
        self.worker_config = worker_config
        self.max_samples_per_sequence = max_samples_per_sequence
        self.paths = dataset_paths(source)
        # energon: the dataset.yaml's subflavors, updated with the metadataset's / caller's
        self.subflavors = {**(source.config.subflavors or {}), **(source.subflavors or {})}
        self._decoder = decoder
        self._trust_remote_code = trust_remote_code
        self.__sample_type__ = self._builder().sample_cls

    def _builder(self) -> SampleBuilder:
        return self.source.new_builder(self._decoder, self._trust_remote_code, self.subflavors)

    def __len__(self) -> int:
        return len(self.source)

    def build(self, worker_rotation_offset: int = 0) -> SampleDataset:
        return SampleDataset(
            self.source,
            self._builder(),
            worker_config=self.worker_config,
            training=self.training,
            max_samples_per_sequence=self.max_samples_per_sequence,
            worker_rotation_offset=worker_rotation_offset,
        )

    def as_file_store(self):
        """The dataset's own parts by name (a cooker's `primary` file store)."""
        from energon_arrow.loader.filestore import PartStore

        return PartStore(self.source.storage)

    def __str__(self) -> str:
        return f"{type(self).__name__}({self.source.name}, training={self.training})"


# energon arguments whose meaning our order does not have (accepted, documented in docs/migration.md)
_NO_EFFECT = ("parallel_shard_iters",)


def _options(
    sample_type: type | None = None,
    shuffle_over_epochs: int | None = 1,
    parallel_shard_iters: int | None = None,
    max_samples_per_sequence: int | None = None,
    decoder: Any = _DEFAULT_DECODER,
    trust_remote_code: bool = False,
    **unsupported,
) -> dict:
    """energon's factory arguments, checked. `parallel_shard_iters` has no effect: a worker reads blocks of its
    range in a planned order, not from parallel shard iterators, so the value cannot change which samples come."""
    if unsupported:
        raise LoaderError(
            f"get_dataset_from_config: unsupported argument(s) {sorted(unsupported)} "
            "(subset: use a metadataset `subset:`; part_filter / handler: not implemented)"
        )
    if shuffle_over_epochs not in (1, None):
        raise LoaderError(
            f"get_dataset_from_config: shuffle_over_epochs={shuffle_over_epochs} is not supported; every "
            "training epoch of a worker is one permutation of its samples (shuffle_over_epochs=1)"
        )
    return dict(
        sample_type=sample_type,
        decoder=decoder,
        max_samples_per_sequence=max_samples_per_sequence,
        trust_remote_code=trust_remote_code,
    )


def _factory(source: SplitSource, training: bool, worker_config, options: dict) -> WebdatasetFactory:
    from energon_arrow.loader.wrappers.factories import factory_class

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
    from energon_arrow.loader.metadataset_sources import open_leaf
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


def load_dataset(path, **kwargs) -> DatasetLoader:
    """A (meta)dataset loader (energon's load_dataset): `get_datasets(training=, split_part=, worker_config=)`;
    a `MetadatasetV2` / `Metadataset` (by the YAML's `__class__`) for a metadataset, else a `DatasetLoader`."""
    if _is_metadataset(os.fspath(path) if isinstance(path, os.PathLike) else str(path)):
        from energon_arrow.loader.wrappers.metadatasets import metadataset_class

        return metadataset_class(path, kwargs.get("storage_options"))(path, **kwargs)
    return DatasetLoader(path, **kwargs)
