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
from energon_arrow.loader.filestore import open_file_store
from energon_arrow.loader.metadataset import is_metadataset, read_metadataset, subset_bounds
from energon_arrow.loader.source import SplitSource, open_split
from energon_arrow.loader.wrappers.core import SampleDataset
from energon_arrow.samples.decoders import PartDecoder

_DEFAULT_DECODER = object()  # energon's default: SampleDecoder()


class WebdatasetFactory:
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
        self.paths = [source.storage.url]
        self.subflavors = dict(source.subflavors or {})
        self._decoder = decoder
        self._trust_remote_code = trust_remote_code
        self.__sample_type__ = self._builder().sample_cls

    def _builder(self) -> SampleBuilder:
        src = self.source
        return SampleBuilder(src.storage, src.config, self._decoder, self.subflavors, self._trust_remote_code)

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

    def __str__(self) -> str:
        return f"WebdatasetFactory({self.source.name}, training={self.training})"


# energon arguments whose meaning our order does not have (accepted, documented in docs/migration.md)
_NO_EFFECT = ("parallel_shard_iters",)


def get_dataset_from_config(
    path,
    *,
    dataset_config: str | None = None,
    split_config: str | None = None,
    split_part: str | None = None,
    training: bool = True,
    subflavors: dict | None = None,
    worker_config,
    sample_type: type | None = None,
    shuffle_over_epochs: int | None = 1,
    parallel_shard_iters: int | None = None,
    max_samples_per_sequence: int | None = None,
    decoder: Any = _DEFAULT_DECODER,
    storage_options: dict | None = None,
    trust_remote_code: bool = False,
    **unsupported,
) -> WebdatasetFactory:
    """The factory of split `split_part` (default "train") of the prepared dataset at `path` (energon's
    get_dataset_from_config). `parallel_shard_iters` has no effect: a worker reads blocks of its range in a
    planned order, not from parallel shard iterators."""
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
    path = os.fspath(path) if isinstance(path, os.PathLike) else path
    if is_metadataset(str(path)):
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
    factory = WebdatasetFactory(
        source,
        training=training,
        worker_config=worker_config,
        decoder=decoder,
        max_samples_per_sequence=max_samples_per_sequence,
        trust_remote_code=trust_remote_code,
    )
    if sample_type is not None and not issubclass(factory.__sample_type__, sample_type):
        raise LoaderError(
            f"{source.name}: samples are {factory.__sample_type__.__name__}, not a subclass of "
            f"{sample_type.__name__}"
        )
    return factory


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


class DatasetLoader:
    """energon's loader of a dataset or metadataset path (what `load_dataset` returns)."""

    def __init__(self, path, *, storage_options: dict | None = None, trust_remote_code: bool = False):
        self.path = os.fspath(path) if isinstance(path, os.PathLike) else str(path)
        self.storage_options = storage_options
        self.trust_remote_code = trust_remote_code

    def post_initialize(self, mds_path=None) -> None:
        return None

    def get_datasets(
        self,
        *,
        training: bool,
        split_part: str,
        worker_config,
        subflavors: dict | None = None,
        shuffle_over_epochs_multiplier: int | None = 1,
        **kwargs,
    ) -> LoadedDatasetList:
        if shuffle_over_epochs_multiplier not in (1, None):
            raise LoaderError(
                f"shuffle_over_epochs_multiplier={shuffle_over_epochs_multiplier} is not supported "
                "(each training epoch is one permutation)"
            )
        common = dict(
            training=training, worker_config=worker_config, trust_remote_code=self.trust_remote_code
        )
        if not is_metadataset(self.path):
            factory = get_dataset_from_config(
                self.path,
                split_part=split_part,
                subflavors=subflavors,
                storage_options=self.storage_options,
                **common,
                **kwargs,
            )
            return LoadedDatasetList([LoadedDataset(factory)], DatasetBlendMode.NONE)
        mds = read_metadataset(self.path, split_part, self.storage_options)
        out = []
        for e in mds.entries:
            factory = get_dataset_from_config(
                e.path,
                split_part=e.split_part or split_part,
                subflavors={**(e.subflavors or {}), **(subflavors or {})},
                storage_options=self.storage_options,
                **common,
                **kwargs,
            )
            start, end = subset_bounds(e.subset, len(factory.source), factory.source.name)
            if (start, end) != (0, len(factory.source)):
                factory.source = factory.source.subset(start, end)
            factory.source.aux = {n: open_file_store(ref, self.storage_options) for n, ref in e.aux.items()}
            out.append(
                LoadedDataset(
                    factory,
                    weight=e.weight if mds.mode == "blend" else None,
                    repetitions=e.repetitions if mds.mode == "blend_epochized" else None,
                    aux=factory.source.aux or None,
                )
            )
        return LoadedDatasetList(out, _MODES[mds.mode])


def load_dataset(path, **kwargs) -> DatasetLoader:
    """A (meta)dataset loader (energon's load_dataset): `get_datasets(training=, split_part=, worker_config=)`."""
    return DatasetLoader(path, **kwargs)
