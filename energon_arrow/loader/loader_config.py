"""`config()` of the fast loaders and their dataset: a nested dict describing what defines the batches.

energon's `loader.config()` describes its pipeline so that a configuration can be stored next to a checkpoint
and compared on restore. Ours describes the loader's own pipeline in the same nested form (`type`, `dataset`,
...): the loader (workers, prefetch), the rank's batch dataset (batch size, rank, the settings that decide the
batch sequence, the task encoder and decoder) and each dataset it reads (storage URL, samples, subflavors, blend
weight or repetitions, shuffle_over_epochs multiplier). Two loaders with equal configs yield the same batches
from the same state. It is not energon's dict: energon's names its internal wrapper datasets and worker
slices, which this loader does not have (docs/migration.md).
"""

from __future__ import annotations

from typing import Any


def _qualname(obj: Any) -> str | None:
    if obj is None:
        return None
    cls = obj if isinstance(obj, type) else type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _source_config(src, index: int, ds) -> dict:
    out = {
        "type": type(src).__qualname__,
        "name": src.name,
        "url": src.storage.url,
        "samples": len(src),
        "shards": len(src.shard_paths),
        "subflavors": dict(src.subflavors or {}),
    }
    if ds.weights is not None:
        out["weight"] = float(ds.weights[index])
    if ds.repetitions is not None:
        out["repetitions"] = float(ds.repetitions[index])
    if ds.over_epochs[index] != 1:
        out["shuffle_over_epochs"] = ds.over_epochs[index]
    return out


def dataset_config(ds) -> dict:
    """The config of a loader/dataset.py `BatchDataset` (or energon's-API subclass)."""
    decoder = getattr(ds, "decoder", None)
    return {
        "type": type(ds).__qualname__,
        "rank": ds.rank,
        "world_size": ds.world_size,
        "batch_size": getattr(ds, "batch_size", ds.local_batch_size),
        "settings": ds.settings.fingerprint(),
        "task_encoder": _qualname(ds.hooks.te),
        "decoder": decoder.config() if decoder is not None and hasattr(decoder, "config") else None,
        "datasets": [_source_config(src, i, ds) for i, src in enumerate(ds.sources)],
    }


def loader_config(loader) -> dict:
    """The config of a loader/loader.py `Loader` (or `BasicLoader` / `SavableLoader`) and its dataset."""
    return {
        "type": type(loader).__qualname__,
        "num_workers": loader.num_workers,
        "prefetch_factor": loader.prefetch_factor,
        "dataset": loader.dataset.config(),
    }
