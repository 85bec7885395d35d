"""`config()` of the energon API's loaders and datasets: the nested description energon 7.4.1 gives of the
pipeline it runs for the same call, so that it compares equal with a config an energon job stored.

energon's `get_train_dataset` / `get_val_dataset` build their pipeline with the task encoder's
`build_train_datasets` / `build_val_datasets`; each stage's `config()` names its energon type and settings. Our
dataset (energon/energon_dataset.py) runs the same order without those stages; this module describes them from
what the dataset knows: the task encoder's hooks, the blend (weights or repetitions), the shuffle buffer, the
virtual epoch or val limit, and per dataset its factory (energon/factory_config.py) and worker slices (the
`slice_offsets` energon/energon_len.py computed). Functions are named by energon's qualified names where they
are energon's (docs/migration.md, "loader.config()").
"""

from __future__ import annotations

import functools
from typing import Any

from energon_arrow.energon.factory_config import core_config, factory_len
from energon_arrow.energon.task_encoder.base import _encode_fns, _overridden
from energon_arrow.energon.wrappers.base import function_config
from energon_arrow.energon.wrappers.factories import (
    CrudeWebdataset,
    DefaultCrudeJsonlDatasetFactory,
    factory_class,
)
from energon_arrow.samples.stateless import get_stateless


def loader_config(loader, kind: str) -> dict:
    """energon's `config()` of `loader` (`kind`: "SavableDataLoader" or "BasicDataLoader", energon/savable_loader.py)."""
    workers = loader.worker_config.num_workers
    return {
        "type": kind,
        "num_workers": workers,
        "persistent_workers": workers > 0,
        "pin_memory": True,
        "prefetch_factor": None if workers == 0 else loader.prefetch_factor,
        "dataset": dataset_config(loader.dataset),
    }


def _map(dataset: dict, fn: Any, *, stateless: bool | None = None, fn_config: dict | None = None) -> dict:
    out = {"type": "MapDataset", "dataset": dataset, "map_fn": function_config(fn)}
    if fn_config:
        out["map_fn_config"] = fn_config
    out["map_fn_stateless"] = get_stateless(fn) if stateless is None else stateless
    return out


def _cooked(ds, index: int, core: dict) -> dict:
    """energon's `build_cook_crude_sample` stage over a crude dataset's core (the first cooker matching)."""
    from energon_arrow.samples.cookers import select_cooker

    te, source = ds.hooks.te, ds.sources[index]
    cooker = select_cooker(te.cookers, source.subflavors, f"subflavors {source.subflavors!r}")
    aux = {name: {"_path": str(store.get_path())} for name, store in (source.aux or {}).items()}
    if cooker.need_primary and "primary" not in aux:
        aux["primary"] = {"_path": source.storage.url}
    cook = functools.partial(te.cook_crude_sample, cooker=cooker, aux={})
    cooker_config = {
        "cook": function_config(cooker.cook),
        "has_subflavors": cooker.has_subflavors,
        "aux": aux,
    }
    return _map(
        core, cook, stateless=get_stateless(te.cook_crude_sample), fn_config={"cooker": cooker_config}
    )


def _loaded(ds, index: int) -> dict:
    """energon's `TaskEncoder._load_dataset` of dataset `index`: its core, cooked when crude."""
    training = ds.mode == "train"
    te = ds.hooks.te
    core = core_config(
        ds.sources[index],
        training=training,
        decoder=getattr(te, "decoder", None),
        slice_offsets=ds.slice_offsets[index],
        worker_config=ds.worker_config,
        shuffle_over_epochs=ds.factory_over_epochs[index],
        parallel_shard_iters=ds.parallel_shard_iters,
        max_samples_per_sequence=ds.max_samples_per_sequence,
    )
    if issubclass(factory_class(ds.sources[index]), (CrudeWebdataset, DefaultCrudeJsonlDatasetFactory)):
        return _cooked(ds, index, core)
    return core


def _repeat(dataset: dict, repeats: float | None, wc: dict) -> dict:
    return {"type": "RepeatDataset", "dataset": dataset, "repeats": repeats, "worker_config": wc}


def _train_blend(ds, wc: dict) -> dict:
    """energon's `build_train_datasets` up to the shuffle buffer: the datasets repeated and blended."""
    loaded = [_loaded(ds, i) for i in range(len(ds.sources))]
    repeat = ds.settings.repeat
    if ds.weights is not None or (ds.repetitions is None and repeat):  # DATASET_WEIGHT, or NONE repeating
        weights = ds.weights if ds.weights is not None else [1.0] * len(loaded)
        inner = [(_repeat(d, None, wc), float(w)) for d, w in zip(loaded, weights)]
        repeat = False
    else:  # SAMPLE_REPETITIONS, or NONE without repeat
        reps = ds.repetitions if ds.repetitions is not None else [None] * len(loaded)
        inner = [
            (d if r in (None, 1) else _repeat(d, r, wc), factory_len(src) * (1 if r is None else r))
            for d, r, src in zip(loaded, reps, ds.sources)
        ]
    out = (
        inner[0][0]
        if len(inner) == 1
        else {"type": "BlendDataset", "dataset_weights": inner, "worker_config": wc}
    )
    if repeat:
        out = _repeat(out, None, wc)
    size = ds.settings.shuffle_buffer
    if size is not None and size > 1:
        out = {"type": "ShuffleBufferDataset", "dataset": out, "size": size, "worker_config": wc}
    return out


def _encoded_batches(ds, dataset: dict, wc: dict) -> dict:
    """energon's `build_encode_sample` and `build_batch` over `dataset`."""
    te = ds.hooks.te
    pre, post = _encode_fns(te)
    if pre is not None:
        dataset = _map(dataset, pre)
    if ds.packing_buffer_size is not None:
        dataset = {
            "type": "PackingDataset",
            "buffer_size": ds.packing_buffer_size,
            "pre_packer": function_config(te.select_samples_to_pack),
            "final_packer": function_config(te.pack_selected_samples),
            "final_packer_stateless": get_stateless(te.pack_selected_samples),
            "worker_config": wc,
            "dataset": dataset,
        }
    elif post is not None:
        dataset = _map(dataset, post)
    batch: dict | None = None
    if _overridden(te, "batch_group_criterion"):
        batch = {
            "type": "GroupBatchDataset",
            "bucket": function_config(te.batch_group_criterion),
            "batcher": function_config(te.batch),
            "batcher_stateless": False,  # energon's build_batch does not pass it to GroupBatchDataset
        }
    elif ds.batch_size is not None:
        batch = {
            "type": "BatchDataset",
            "batch_size": ds.batch_size,
            "batcher": function_config(te.batch),
            "batcher_stateless": get_stateless(te.batch),
        }
    if batch is None:
        return dataset
    dataset = {**batch, "drop_last": ds.batch_drop_last, "worker_config": wc, "dataset": dataset}
    return _map(dataset, te.encode_batch) if _overridden(te, "encode_batch") else dataset


def dataset_config(ds) -> dict:
    """energon's `config()` of the pipeline `get_train_dataset` / `get_val_dataset` builds for `ds`'s call."""
    wc = ds.worker_config.config()
    if ds.mode == "train":
        out = _encoded_batches(ds, _train_blend(ds, wc), wc)
        if ds.virtual_epoch_length > 0:
            out = {
                "type": "EpochizeDataset",
                "dataset": out,
                "length": ds.virtual_epoch_length,
                "worker_config": wc,
            }
        return out
    loaded = [_loaded(ds, i) for i in range(len(ds.sources))]
    out = loaded[0] if len(loaded) == 1 else {"type": "ConcatDataset", "datasets": loaded}
    out = _encoded_batches(ds, out, wc)
    if ds.batch_limit is not None:
        out = {
            "type": "LimitDataset",
            "dataset": out,
            "length": ds.batch_limit,
            "reset_after_epoch": True,
            "worker_config": wc,
        }
    return out
