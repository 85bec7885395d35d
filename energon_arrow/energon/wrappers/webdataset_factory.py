"""energon's dataset factory over a prepared split (`WebdatasetFactory`: `build()` is the per-worker core dataset,
`as_file_store()` random access by key) and the energon factory arguments it takes (`_options`); the per-type
factory classes (factories.py) derive it, `get_dataset_from_config` and `DatasetLoader` (config.py) make it."""

from __future__ import annotations

from typing import Any

from energon_arrow.energon.wrappers.core import SampleDataset
from energon_arrow.energon.wrappers.factory_base import BaseCoreDatasetFactory
from energon_arrow.loader.builder import SampleBuilder
from energon_arrow.loader.errors import LoaderError
from energon_arrow.loader.source import SplitSource
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
