"""energon's dataset-building API for custom pipelines, over energon-arrow's index: `get_dataset_from_config`,
`load_dataset`, and the savable wrapper datasets (`MapDataset`, `BatchDataset`, `BlendDataset`, ...).

Modules: base (SavableDataset protocol, restore keys, worker rng), slicing (per-worker sample ranges), core (the
per-worker sample dataset), config (factories, load_dataset), map / batch / blend / epochs (the wrappers),
failures (consecutive-failure tolerance), savable_loader (the DataLoader over a pipeline).
"""

_EXPORTS = {
    "SavableDataset": "base",
    "BaseWrapperDataset": "base",
    "WorkerRng": "base",
    "SampleDataset": "core",
    "get_dataset_from_config": "config",
    "load_dataset": "config",
    "DatasetLoader": "config",
    "DatasetBlendMode": "config",
    "LoadedDataset": "config",
    "LoadedDatasetList": "config",
    "WebdatasetFactory": "config",
    "MapDataset": "map",
    "FilterDataset": "map",
    "IterMapDataset": "map",
    "LogSampleDataset": "map",
    "GcDataset": "map",
    "BatchDataset": "batch",
    "GroupBatchDataset": "batch",
    "BlendDataset": "blend",
    "MixBatchDataset": "blend",
    "ConcatDataset": "blend",
    "RepeatDataset": "epochs",
    "LimitDataset": "epochs",
    "EpochizeDataset": "epochs",
    "ShuffleBufferDataset": "epochs",
    "FatalSampleError": "failures",
    "PackingDataset": "packing",
    "PipelineLoader": "savable_loader",
    "SavablePipelineLoader": "savable_loader",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
