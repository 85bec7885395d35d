"""energon's dataset-building API for custom pipelines, over energon-arrow's index: `get_dataset_from_config`,
`load_dataset`, and the savable wrapper datasets (`MapDataset`, `BatchDataset`, `BlendDataset`, ...); at
`megatron.energon.wrappers`' path, `__all__` holds energon's names of that module (the others load on first use too).

Modules: base (SavableDataset protocol, restore keys, worker rng), slicing (per-worker sample ranges), core (the
per-worker sample dataset), webdataset_factory (the factory over a prepared split), factories (energon's factory
classes), config (get_dataset_from_config, DatasetLoader), metadatasets (Metadataset / MetadatasetV2,
load_dataset), map / batch / blend / epochs / packing (the wrappers), failures (consecutive-failure tolerance),
savable_loader (the DataLoader over a pipeline); blend_dataset: the mirror of energon's module of that name.
"""

_EXPORTS = {
    "SavableDataset": "base",
    "BaseWrapperDataset": "base",
    "WorkerRng": "base",
    "SampleDataset": "core",
    "get_dataset_from_config": "config",
    "load_dataset": "metadatasets",
    "DatasetLoader": "config",
    "DatasetBlendMode": "config",
    "LoadedDataset": "config",
    "LoadedDatasetList": "config",
    "WebdatasetFactory": "webdataset_factory",
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
    # energon's wrappers module also exports these sample helpers
    "SkipSample": "energon_arrow.samples",
    "concat_pad": "energon_arrow.samples",
    "generic_concat": "energon_arrow.samples",
    "homogeneous_concat_mix": "energon_arrow.samples",
}

# energon 7.4.1's `megatron.energon.wrappers.__all__` names that energon_arrow implements
__all__ = [
    "BatchDataset",
    "BlendDataset",
    "ConcatDataset",
    "EpochizeDataset",
    "FilterDataset",
    "GcDataset",
    "GroupBatchDataset",
    "IterMapDataset",
    "LimitDataset",
    "LogSampleDataset",
    "MapDataset",
    "MixBatchDataset",
    "PackingDataset",
    "RepeatDataset",
    "ShuffleBufferDataset",
    "SkipSample",
    "concat_pad",
    "generic_concat",
    "homogeneous_concat_mix",
]


def __getattr__(name):
    if name in _EXPORTS:
        import importlib

        module = _EXPORTS[name]
        return getattr(importlib.import_module(module if "." in module else f"{__name__}.{module}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
