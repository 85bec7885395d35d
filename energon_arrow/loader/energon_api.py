"""Migration shims with megatron-energon's names: switch a training script by changing one import.

`get_train_dataset` / `get_val_dataset` accept energon's common arguments and return a `BatchDataset`;
`get_loader` / `get_savable_loader` return a `Loader` yielding energon-shaped batches (a sample of the dataset's
type whose fields are stacked tensors or lists, `__key__` a list of keys). Arguments energon has but energon-arrow
does not implement raise a `LoaderError` naming them (nothing is silently ignored).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from energon_arrow.loader.dataset import BatchDataset, LoaderSettings
from energon_arrow.loader.errors import LoaderError
from energon_arrow.loader.filestore import open_file_store
from energon_arrow.loader.loader import Loader
from energon_arrow.loader.metadataset import is_metadataset, read_metadataset, subset_bounds
from energon_arrow.loader.ranks import distributed_rank_world
from energon_arrow.loader.source import SplitSource, open_split
from energon_arrow.loader.wrappers.savable_loader import PipelineLoader, SavablePipelineLoader, is_pipeline
from energon_arrow.samples.batch import batch_samples
from energon_arrow.samples.cookers import Cooker
from energon_arrow.samples.decoders import PartDecoder
from energon_arrow.samples.stateless import stateless


@dataclass
class WorkerConfig:
    """Rank, world size and DataLoader workers of this process (energon's WorkerConfig)."""

    rank: int
    world_size: int
    num_workers: int
    seed_offset: int = 0

    @staticmethod
    def default_worker_config(num_workers: int = 4) -> WorkerConfig:
        rank, world = distributed_rank_world()
        return WorkerConfig(rank=rank, world_size=world, num_workers=num_workers)


def _convert(obj: Any, cls: type | None) -> Any:
    if cls is None or isinstance(obj, cls):
        return obj
    if dataclasses.is_dataclass(obj):
        fields = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    elif isinstance(obj, dict):
        fields = dict(obj)
    else:
        raise LoaderError(f"cannot convert {type(obj).__name__} to {cls.__name__}")
    return fields if issubclass(cls, dict) else cls(**fields)


class DefaultTaskEncoder:
    """energon's DefaultTaskEncoder: identity encode, default batching, optional type conversion.

    `decoder`: a `PartDecoder` (default: decode by extension) or None for raw bytes, as in energon.
    `cookers`: `Cooker`s for CrudeWebdataset samples.
    """

    decoder: PartDecoder | None = PartDecoder()
    cookers: Sequence[Cooker] = ()

    def __init__(
        self,
        *,
        encoded_sample_type: type | None = None,
        raw_batch_type: type | None = None,
        batch_type: type | None = None,
    ):
        self._encoded_sample_type = encoded_sample_type
        self._raw_batch_type = raw_batch_type
        self._batch_type = batch_type

    def is_default_encoding(self) -> bool:
        """True when encode_sample / batch / encode_batch are the defaults and convert nothing (the loader then
        assembles batches column-wise, without per-sample objects)."""
        cls = type(self)
        return (
            cls.encode_sample is DefaultTaskEncoder.encode_sample
            and cls.batch is DefaultTaskEncoder.batch
            and cls.encode_batch is DefaultTaskEncoder.encode_batch
            and self._encoded_sample_type is None
            and self._raw_batch_type is None
            and self._batch_type is None
        )

    @stateless
    def encode_sample(self, sample: Any) -> Any:
        return _convert(sample, self._encoded_sample_type)

    def batch(self, samples: list) -> Any:
        return _convert(batch_samples(samples), self._raw_batch_type)

    def encode_batch(self, batch: Any) -> Any:
        return _convert(batch, self._batch_type)


_UNSUPPORTED = {
    "packing_buffer_size": "sample packing is not implemented",
    "virtual_epoch_length": "epochs here are whole passes; use the loader's state to stop early",
    "shuffle_over_epochs_multiplier": "the epoch order is a fresh global permutation every epoch",
    "parallel_shard_iters": "reads are planned per batch, not per shard iterator",
    "max_samples_per_sequence_random": "not implemented",
    "cache_pool": "cache pools are not implemented; aux stores read directly",
    "handler": "errors are handled by skip_errors / error_budget",
    "checkpoint_every_sec": "not needed: the loader state is exact after every batch",
    "checkpoint_every_min_n_samples": "not needed: the loader state is exact after every batch",
    "n_checkpoints": "not needed: the loader state is exact after every batch",
    "watchdog_timeout_seconds": "use timeout= (seconds a batch may take) instead",
}


def _refuse(kwargs: dict) -> None:
    if kwargs:
        reasons = "; ".join(f"{k}: {_UNSUPPORTED.get(k, 'unknown argument')}" for k in sorted(kwargs))
        raise LoaderError(f"unsupported energon argument(s): {reasons}")


def _sources(path, split_part, subflavors, storage_options) -> tuple[list[SplitSource], list[float] | None]:
    if not is_metadataset(str(path)):
        return [open_split(path, split_part, storage_options, subflavors)], None
    mds = read_metadataset(str(path), split_part, storage_options)
    sources, weights = [], []
    for e in mds.entries:
        src = open_split(
            e.path,
            e.split_part or split_part,
            storage_options,
            {**(e.subflavors or {}), **(subflavors or {})},
        )
        start, end = subset_bounds(e.subset, len(src), src.name)
        if (start, end) != (0, len(src)):
            src = src.subset(start, end)
        src.aux = {name: open_file_store(ref, storage_options) for name, ref in e.aux.items()}
        sources.append(src)
        weights.append(e.weight if mds.mode == "blend" else e.repetitions * len(src))
    return sources, (weights if mds.mode != "single" else None)


def _dataset(
    path,
    worker_config,
    batch_size,
    task_encoder,
    split_part,
    subflavors,
    storage_options,
    trust_remote_code,
    settings: dict,
    weights_used: bool,
) -> BatchDataset:
    if worker_config is None:
        raise LoaderError("worker_config is required (WorkerConfig(rank, world_size, num_workers))")
    if batch_size is None or batch_size < 1:
        raise LoaderError(f"batch_size must be a positive integer, got {batch_size!r}")
    te = task_encoder if task_encoder is not None else DefaultTaskEncoder()
    decoder = getattr(te, "decoder", PartDecoder())
    if decoder is not None and not isinstance(decoder, PartDecoder):
        raise LoaderError(
            f"task_encoder.decoder must be an energon_arrow PartDecoder or None, got {decoder!r}"
        )
    sources, weights = _sources(path, split_part, subflavors, storage_options)
    ds = BatchDataset(
        sources,
        LoaderSettings(
            global_batch_size=batch_size * worker_config.world_size,
            seed=worker_config.seed_offset,
            **settings,
        ),
        rank=worker_config.rank,
        world_size=worker_config.world_size,
        weights=weights if weights_used else None,
        decoder=decoder if decoder is not None else PartDecoder(raw=True),
        task_encoder=te,
        trust_remote_code=trust_remote_code,
    )
    ds.worker_config = worker_config
    return ds


def get_train_dataset(
    path,
    *,
    split_part: str = "train",
    worker_config: WorkerConfig | None = None,
    batch_size: int | None = None,
    batch_drop_last: bool = False,
    shuffle_buffer_size: int | None = None,
    max_samples_per_sequence: int | None = None,
    task_encoder: Any = None,
    repeat: bool = True,
    subflavors: dict | None = None,
    storage_options: dict | None = None,
    trust_remote_code: bool = False,
    skip_errors: bool = False,
    error_budget: int = 100,
    **unsupported,
) -> BatchDataset:
    """Shuffled training batches (energon's get_train_dataset). `max_samples_per_sequence` is the number of
    consecutive samples of a shard kept together (default 16); `shuffle_buffer_size` the shuffle window."""
    _refuse(unsupported)
    settings = dict(
        shuffle=True,
        repeat=repeat,
        block_size=max_samples_per_sequence or 16,
        shuffle_buffer=shuffle_buffer_size or 0,
        drop_last=batch_drop_last,
        skip_errors=skip_errors,
        error_budget=error_budget,
    )
    return _dataset(
        path,
        worker_config,
        batch_size,
        task_encoder,
        split_part,
        subflavors,
        storage_options,
        trust_remote_code,
        settings,
        weights_used=True,
    )


def get_val_dataset(
    path,
    *,
    split_part: str = "val",
    worker_config: WorkerConfig | None = None,
    batch_size: int | None = None,
    batch_drop_last: bool = False,
    task_encoder: Any = None,
    subflavors: dict | None = None,
    storage_options: dict | None = None,
    trust_remote_code: bool = False,
    skip_errors: bool = False,
    error_budget: int = 100,
    **unsupported,
) -> BatchDataset:
    """Every sample of the split exactly once, in order, sharded across ranks (energon's get_val_dataset)."""
    _refuse(unsupported)
    settings = dict(
        shuffle=False,
        repeat=False,
        drop_last=batch_drop_last,
        skip_errors=skip_errors,
        error_budget=error_budget,
    )
    return _dataset(
        path,
        worker_config,
        batch_size,
        task_encoder,
        split_part,
        subflavors,
        storage_options,
        trust_remote_code,
        settings,
        weights_used=False,
    )


class SavableLoader(Loader):
    """energon's savable loader: `save_state_rank()` / `restore_state_rank(state)` on top of `state_dict()`."""

    def save_state_rank(self) -> dict:
        return self.state_dict()

    def restore_state_rank(self, state: dict | None) -> None:
        if state is not None:
            self.load_state_dict(state)


def _loader(cls, dataset: BatchDataset, worker_config, prefetch_factor, timeout, unsupported) -> Loader:
    _refuse(unsupported)
    wc = worker_config or getattr(dataset, "worker_config", None)
    if wc is None:
        raise LoaderError("worker_config is required")
    return cls(
        dataset, num_workers=wc.num_workers, prefetch_factor=prefetch_factor, device="cpu", timeout=timeout
    )


def get_loader(
    dataset: BatchDataset,
    *,
    worker_config: WorkerConfig | None = None,
    prefetch_factor: int = 2,
    timeout: float = 0,
    **unsupported,
) -> Loader:
    if is_pipeline(dataset):  # energon wrapper pipelines (MapDataset, ...): loader/wrappers/
        return PipelineLoader(
            dataset,
            worker_config=worker_config,
            prefetch_factor=prefetch_factor,
            timeout=timeout,
            **unsupported,
        )
    return _loader(Loader, dataset, worker_config, prefetch_factor, timeout, unsupported)


def get_savable_loader(
    dataset: BatchDataset,
    *,
    worker_config: WorkerConfig | None = None,
    prefetch_factor: int = 2,
    timeout: float = 0,
    **unsupported,
) -> SavableLoader:
    if is_pipeline(dataset):  # energon wrapper pipelines (MapDataset, ...): loader/wrappers/
        return SavablePipelineLoader(
            dataset,
            worker_config=worker_config,
            prefetch_factor=prefetch_factor,
            timeout=timeout,
            **unsupported,
        )
    return _loader(SavableLoader, dataset, worker_config, prefetch_factor, timeout, unsupported)
