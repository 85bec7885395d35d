"""energon 7.4's loading API with its names and arguments: switch a training script by changing one import.

`get_train_dataset` / `get_val_dataset` / `get_val_datasets` return `EnergonDataset`s (energon/energon_dataset.py);
`get_loader` / `get_savable_loader` return `BasicLoader` / `SavableLoader` (energon/savable_loader.py). Task
encoders live in energon/task_encoder/base.py, `WorkerConfig` in energon/worker_config.py; this module re-exports them.
Every energon argument is accepted with energon's meaning, or accepted with no effect where our design makes it
moot, or refused with a LoaderError naming it where it would change results and is not implemented (see
energon/energon_args.py and docs/migration.md). Nothing is silently ignored.
"""

from __future__ import annotations

from typing import Any

from energon_arrow.energon.cache_pool import check_pool
from energon_arrow.energon.energon_args import (
    apply_deprecated_kwargs,
    check_dataset_kwargs,
    config_files,
    refuse_unknown,
)
from energon_arrow.energon.energon_dataset import EnergonDataset, build_dataset
from energon_arrow.energon.metadataset_sources import OpenedSources, open_sources
from energon_arrow.energon.packing import check_packing
from energon_arrow.energon.savable_loader import BasicLoader, SavableLoader
from energon_arrow.energon.task_encoder.base import AugmentTaskEncoder, DefaultTaskEncoder, TaskEncoder
from energon_arrow.energon.task_pipeline import PipelineBuilders
from energon_arrow.energon.worker_config import WorkerConfig
from energon_arrow.energon.wrappers.metadatasets import load_dataset
from energon_arrow.energon.wrappers.savable_loader import PipelineLoader, SavablePipelineLoader, is_pipeline
from energon_arrow.loader.errors import LoaderError
from energon_arrow.loader.source import SplitSource

#: energon's name of the savable loader class (for type hints and isinstance checks)
SavableDataLoader = SavableLoader

__all__ = [
    "AugmentTaskEncoder",
    "BasicLoader",
    "DefaultTaskEncoder",
    "EnergonDataset",
    "SavableDataLoader",
    "SavableLoader",
    "TaskEncoder",
    "WorkerConfig",
    "get_loader",
    "get_savable_loader",
    "get_train_dataset",
    "get_val_dataset",
    "get_val_datasets",
]


def _sources(path, split_part, subflavors, storage_options, configs: dict) -> OpenedSources:
    return open_sources(path, split_part, subflavors, storage_options, **configs)


class _Request:
    """The checked arguments of one get_*_dataset call: task encoder, deprecated handler, our own options."""

    def __init__(self, task_encoder, kwargs: dict, function: str):
        self.te = task_encoder if task_encoder is not None else DefaultTaskEncoder()
        self.handler = apply_deprecated_kwargs(kwargs, self.te)
        self.packing_buffer_size = kwargs.pop("packing_buffer_size", None)
        check_packing(self.te, self.packing_buffer_size, function)
        #: training: energon's sequences read at once per worker (default 16), energon/train_order.py
        self.parallel_shard_iters = kwargs.pop("parallel_shard_iters", None)
        #: training order: "energon" (energon's per-worker order, the default) or "global" (ours: one order over
        #: all ranks that does not depend on the worker count, so a state survives world size / worker changes)
        self.sample_order = kwargs.pop("sample_order", "energon")
        if self.sample_order not in ("energon", "global"):
            raise LoaderError(
                f"{function}: sample_order must be 'energon' or 'global', got {self.sample_order!r}"
            )
        check_dataset_kwargs(kwargs, function)
        self.configs = config_files(kwargs, function)
        self.subflavors = kwargs.pop("subflavors", None)
        self.storage_options = kwargs.pop("storage_options", None)
        self.trust_remote_code = kwargs.pop("trust_remote_code", False)
        self.sample_type = kwargs.pop("sample_type", None)
        self.errors = {
            "skip_errors": kwargs.pop("skip_errors", None),
            "error_budget": kwargs.pop("error_budget", 100),
            "verify": kwargs.pop("verify", None),  # "crc": parts checked against prepare's CRC32C
        }
        refuse_unknown(kwargs, function)

    def sources(self, path, split_part: str) -> OpenedSources:
        return _sources(path, split_part, self.subflavors, self.storage_options, self.configs)

    def build(self, sources, settings: dict, **kw) -> EnergonDataset:
        return build_dataset(
            sources,
            task_encoder=self.te,
            settings={**settings, **self.errors},
            trust_remote_code=self.trust_remote_code,
            sample_type=self.sample_type,
            error_handler=self.handler,
            packing_buffer_size=self.packing_buffer_size,
            **kw,
        )


def _overrides(te: Any, name: str) -> bool:
    """Whether the task encoder's class overrides energon's pipeline method `name` (then it builds the pipeline)."""
    fn = getattr(type(te), name, None)
    return fn is not None and fn is not getattr(PipelineBuilders, name)


def _loaded_datasets(te, path, kwargs: dict, function: str, **get_datasets_kwargs):
    """energon's `load_dataset(path).get_datasets(...)` for a task encoder that builds its own pipeline."""
    if apply_deprecated_kwargs(kwargs, te) is not None:
        raise LoaderError(
            f"{function}: handler= is not used by a task encoder's own build_*_datasets pipeline; set "
            "worker_config.global_error_handler"
        )
    load_kwargs = {k: kwargs.pop(k) for k in ("storage_options", "trust_remote_code") if k in kwargs}
    return load_dataset(path, **load_kwargs).get_datasets(decoder=te.decoder, **get_datasets_kwargs, **kwargs)


def get_train_dataset(
    path,
    *,
    split_part: str = "train",
    worker_config: WorkerConfig | None = None,
    batch_size: int | None = None,
    batch_drop_last: bool = False,
    packing_buffer_size: int | None = None,
    shuffle_buffer_size: int | None = None,
    max_samples_per_sequence: int | None = None,
    virtual_epoch_length: int = 0,
    shuffle_over_epochs_multiplier: int | None = 1,
    task_encoder: TaskEncoder | None = None,
    repeat: bool = True,
    **kwargs,
) -> EnergonDataset:
    """Shuffled training batches (energon's get_train_dataset, same arguments and meaning).

    `batch_size=None`: unbatched, the loader yields single encoded samples. `max_samples_per_sequence`: number of
    consecutive samples of a shard kept together (default 16); `shuffle_buffer_size`: the shuffle window.
    `virtual_epoch_length > 0`: each iteration of the loader yields that many batches and the next continues.
    `shuffle_over_epochs_multiplier`: k >= 1 shuffles over k epochs (a finite pass is k epochs), -1 draws
    blocks of samples with replacement (endless), None keeps the samples in order (loader/order.py).
    `packing_buffer_size`: pack samples with the task encoder's packing hooks (energon/packing.py).
    Also: `subflavors`, `sample_type` (checked against the dataset's), energon's deprecated decoder arguments
    and `handler`, the no-effect arguments of energon/energon_args.py, and ours: `storage_options`,
    `trust_remote_code`, `skip_errors`, `error_budget`, `verify` ("crc": every part read is checked against the
    CRC32C prepare recorded, loader/verify_crc.py), `sample_order` ("energon": energon's per-worker order, the
    default; "global": one order over all ranks that does not depend on the worker count, loader/schedule.py).

    A task encoder that overrides `build_train_datasets` builds the pipeline itself, as in energon: it gets
    `load_dataset(path).get_datasets(...)`'s datasets and its pipeline is returned (served by the pipeline
    loaders of energon/wrappers/)."""

    def pipeline(te, kw: dict):
        """energon's own pipeline for these arguments: the task encoder's build_train_datasets over
        load_dataset(path)'s datasets."""
        loaded = _loaded_datasets(
            te,
            path,
            kw,
            "get_train_dataset",
            training=True,
            split_part=split_part,
            worker_config=worker_config,
            max_samples_per_sequence=max_samples_per_sequence,
            shuffle_over_epochs_multiplier=shuffle_over_epochs_multiplier,
        )
        return te.build_train_datasets(
            datasets=loaded.datasets,
            worker_config=worker_config,
            batch_size=batch_size,
            batch_drop_last=batch_drop_last,
            packing_buffer_size=packing_buffer_size,
            virtual_epoch_length=virtual_epoch_length,
            shuffle_buffer_size=shuffle_buffer_size,
            blend_mode=loaded.blend_mode,
            repeat=repeat,
        )

    if task_encoder is not None and _overrides(task_encoder, "build_train_datasets"):
        return pipeline(task_encoder, kwargs)
    pipeline_kwargs = dict(kwargs)
    kwargs["packing_buffer_size"] = packing_buffer_size
    req = _Request(task_encoder, kwargs, "get_train_dataset")
    opened = req.sources(path, split_part)
    settings = dict(
        shuffle=True,
        repeat=repeat,
        block_size=max_samples_per_sequence or 16,
        block_in_order=max_samples_per_sequence is None,
        shuffle_buffer=shuffle_buffer_size or 0,
        shuffle_over_epochs=shuffle_over_epochs_multiplier,
        source_over_epochs=tuple(opened.multipliers) if opened.multipliers else None,
    )
    ds = req.build(
        opened.sources,
        settings,
        mode="train",
        worker_config=worker_config,
        batch_size=batch_size,
        batch_drop_last=batch_drop_last,
        virtual_epoch_length=virtual_epoch_length,
        max_samples_per_sequence=max_samples_per_sequence,
        parallel_shard_iters=req.parallel_shard_iters,
        sample_order=req.sample_order,
        **opened.dataset_arguments(training=True, repeat=repeat),
    )
    te = req.te
    ds.pipeline_recipe = lambda: pipeline(te, dict(pipeline_kwargs))
    return ds


def _val(
    req: _Request, sources, multipliers, worker_config, batch_size, batch_drop_last, limit
) -> EnergonDataset:
    return req.build(
        sources,
        dict(shuffle=False, repeat=False),
        mode="val",
        worker_config=worker_config,
        batch_size=batch_size,
        batch_drop_last=batch_drop_last,
        limit=limit,
        source_over_epochs=multipliers,
    )


def get_val_dataset(
    path,
    *,
    split_part: str = "val",
    worker_config: WorkerConfig | None = None,
    batch_size: int | None = None,
    batch_drop_last: bool = False,
    packing_buffer_size: int | None = None,
    limit: int | None = None,
    task_encoder: TaskEncoder | None = None,
    **kwargs,
) -> EnergonDataset:
    """Every sample of the split once per pass, in order, sharded across ranks (energon's get_val_dataset).
    `limit`: at most that many batches per rank and pass (each pass starts over). A task encoder overriding
    `build_val_datasets` builds the pipeline itself (see get_train_dataset)."""

    def pipeline(te, kw: dict):
        """energon's own pipeline for these arguments (see get_train_dataset)."""
        loaded = _loaded_datasets(
            te,
            path,
            kw,
            "get_val_dataset",
            training=False,
            split_part=split_part,
            worker_config=worker_config,
        )
        return te.build_val_datasets(
            datasets=loaded.datasets,
            worker_config=worker_config,
            batch_size=batch_size,
            batch_drop_last=batch_drop_last,
            packing_buffer_size=packing_buffer_size,
            limit=limit,
        )

    if task_encoder is not None and _overrides(task_encoder, "build_val_datasets"):
        return pipeline(task_encoder, kwargs)
    pipeline_kwargs = dict(kwargs)
    kwargs["packing_buffer_size"] = packing_buffer_size
    req = _Request(task_encoder, kwargs, "get_val_dataset")
    opened = req.sources(path, split_part)
    ds = _val(req, opened.sources, opened.multipliers, worker_config, batch_size, batch_drop_last, limit)
    te = req.te
    ds.pipeline_recipe = lambda: pipeline(te, dict(pipeline_kwargs))
    return ds


def get_val_datasets(
    path,
    *,
    split_part: str = "val",
    worker_config: WorkerConfig | None = None,
    batch_size: int | None = None,
    batch_drop_last: bool = False,
    packing_buffer_size: int | None = None,
    limit: int | None = None,
    task_encoder: TaskEncoder | None = None,
    **kwargs,
) -> list[tuple[EnergonDataset, SplitSource]]:
    """One val dataset per dataset of a metadataset (energon's get_val_datasets): [(dataset, its source)]; with
    a task encoder overriding `build_val_datasets`: [(its pipeline of that dataset, the dataset's factory)]."""
    if task_encoder is not None and _overrides(task_encoder, "build_val_datasets"):
        loaded = _loaded_datasets(
            task_encoder,
            path,
            kwargs,
            "get_val_datasets",
            training=False,
            split_part=split_part,
            worker_config=worker_config,
        )
        return [
            (
                task_encoder.build_val_datasets(
                    datasets=[d],
                    worker_config=worker_config,
                    batch_size=batch_size,
                    batch_drop_last=batch_drop_last,
                    packing_buffer_size=packing_buffer_size,
                    limit=limit,
                ),
                d.dataset,
            )
            for d in loaded.datasets
        ]
    kwargs["packing_buffer_size"] = packing_buffer_size
    req = _Request(task_encoder, kwargs, "get_val_datasets")
    opened = req.sources(path, split_part)
    multipliers = opened.multipliers or [1] * len(opened.sources)
    return [
        (_val(req, [src], [m], worker_config, batch_size, batch_drop_last, limit), src)
        for src, m in zip(opened.sources, multipliers)
    ]


def _check_loader_worker_config(dataset, worker_config, function: str) -> None:
    if worker_config is not None and worker_config != getattr(dataset, "worker_config", None):
        raise LoaderError(
            f"{function}: the worker_config passed does not match the dataset's (pass it to the dataset only)"
        )


def _make_loader(
    function: str, fast_cls, pipeline_cls, dataset, worker_config, cache_pool, common, pipeline_only
):
    """`pipeline_cls` over an energon wrapper pipeline (energon/wrappers/), else `fast_cls` over our dataset;
    `common`: the arguments both take, `pipeline_only`: those only the pipeline loader uses."""
    if is_pipeline(dataset):
        return pipeline_cls(
            dataset, worker_config=worker_config, cache_pool=cache_pool, **common, **pipeline_only
        )
    _check_loader_worker_config(dataset, worker_config, function)
    check_pool(cache_pool, function)
    return fast_cls(dataset, cache_pool=cache_pool, **common)


def get_loader(
    dataset: EnergonDataset,
    *,
    worker_config: WorkerConfig | None = None,
    prefetch_factor: int = 2,
    cache_pool: Any = None,
    watchdog_timeout_seconds: float | None = 60,
    watchdog_initial_timeout_seconds: float | None = None,
    fail_on_timeout: bool = False,
    timeout: float = 0,
) -> BasicLoader:
    """A loader over `dataset` (energon's get_loader). `timeout` (ours): seconds a worker may take per batch."""
    common = dict(
        prefetch_factor=prefetch_factor,
        timeout=timeout,
        watchdog_timeout_seconds=watchdog_timeout_seconds,
        watchdog_initial_timeout_seconds=watchdog_initial_timeout_seconds,
        fail_on_timeout=fail_on_timeout,
    )
    return _make_loader(
        "get_loader", BasicLoader, PipelineLoader, dataset, worker_config, cache_pool, common, {}
    )


def get_savable_loader(
    dataset: EnergonDataset,
    *,
    worker_config: WorkerConfig | None = None,
    checkpoint_every_sec: float = 60,
    checkpoint_every_min_n_samples: int | None = None,
    n_checkpoints: int | None = None,
    gc_collect_every_n_steps: int = 10,
    prefetch_factor: int = 2,
    cache_pool: Any = None,
    watchdog_timeout_seconds: float | None = 60,
    watchdog_initial_timeout_seconds: float | None = None,
    fail_on_timeout: bool = False,
    timeout: float = 0,
) -> SavableLoader:
    """A loader whose position can be saved and restored (energon's get_savable_loader). The checkpoint and gc
    arguments are accepted with no effect: the state is exact after every batch (docs/migration.md)."""
    common = dict(
        prefetch_factor=prefetch_factor,
        timeout=timeout,
        watchdog_timeout_seconds=watchdog_timeout_seconds,
        watchdog_initial_timeout_seconds=watchdog_initial_timeout_seconds,
        fail_on_timeout=fail_on_timeout,
    )
    pipeline_only = dict(
        checkpoint_every_sec=checkpoint_every_sec,
        checkpoint_every_min_n_samples=checkpoint_every_min_n_samples,
        n_checkpoints=n_checkpoints,
        gc_collect_every_n_steps=gc_collect_every_n_steps,
    )
    return _make_loader(
        "get_savable_loader",
        SavableLoader,
        SavablePipelineLoader,
        dataset,
        worker_config,
        cache_pool,
        common,
        pipeline_only,
    )
