"""energon-arrow: prepare and load WebDataset shards and Megatron token datasets with an Arrow core."""

__version__ = "0.1.0"


# energon migration shims and sample types (loader), imported on first use
_LOADER_EXPORTS = {
    "WorkerConfig": "energon_arrow.energon.energon_api",
    "get_train_dataset": "energon_arrow.energon.energon_api",
    "get_val_dataset": "energon_arrow.energon.energon_api",
    "get_loader": "energon_arrow.energon.energon_api",
    "get_savable_loader": "energon_arrow.energon.energon_api",
    "traverse_metadataset": "energon_arrow.energon.metadataset_api",
    "prepare_metadataset": "energon_arrow.energon.metadataset_api",
    "TraversedDatasetReference": "energon_arrow.energon.metadataset_api",
    "DefaultTaskEncoder": "energon_arrow.energon.energon_api",
    "TaskEncoder": "energon_arrow.energon.energon_api",
    "AugmentTaskEncoder": "energon_arrow.energon.energon_api",
    "get_val_datasets": "energon_arrow.energon.energon_api",
    "SavableDataLoader": "energon_arrow.energon.energon_api",
    # energon's error_handling guide imports it from the top level (energon 7.4.1 has it only in .errors)
    "FatalSampleError": "energon_arrow.loader.errors",
    **{
        name: "energon_arrow.energon.cache_pool"
        for name in (
            "CachePool",
            "DirectLazy",
            "FileCacheLazy",
            "FileStoreCachePool",
            "Lazy",
            "MockLazy",
            "NoCachePool",
        )
    },
    # energon's wrapper datasets and dataset-building API (energon's meaning of BatchDataset: the wrapper;
    # the fast batched loader dataset stays energon_arrow.loader.BatchDataset)
    **{
        name: "energon_arrow.energon.wrappers"
        for name in (
            "BatchDataset",
            "BlendDataset",
            "ConcatDataset",
            "DatasetLoader",
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
            "SavableDataset",
            "ShuffleBufferDataset",
            "get_dataset_from_config",
            "load_dataset",
        )
    },
    # energon's dataset factory classes (class-style dataset.yaml, isinstance on get_dataset_from_config)
    **{
        name: "energon_arrow.energon.wrappers.factories"
        for name in (
            "BaseCoreDatasetFactory",
            "BaseWebdatasetFactory",
            "CaptioningWebdataset",
            "CrudeJsonlDatasetFactory",
            "CrudeWebdataset",
            "DefaultCrudeJsonlDatasetFactory",
            "DefaultDecoderWebdatasetFactory",
            "DefaultGenericWebdatasetFactory",
            "ImageClassificationWebdataset",
            "ImageWebdataset",
            "InterleavedWebdataset",
            "JoinedWebdatasetFactory",
            "MultiChoiceVQAWebdataset",
            "OCRWebdataset",
            "SimilarityInterleavedWebdataset",
            "StandardWebdatasetFactory",
            "TextWebdataset",
            "VQAOCRWebdataset",
            "VQAWebdataset",
            "VidQAWebdataset",
        )
    },
    "FileStore": "energon_arrow.loader.filestore_api",
    "FileStoreDecoder": "energon_arrow.loader.filestore_api",
    "PrimaryFileStore": "energon_arrow.loader.filestore_api",
    "DecodeFileStore": "energon_arrow.loader.filestore_api",
    "SystemFileStore": "energon_arrow.loader.filestore",
    "DatasetLoaderInterface": "energon_arrow.energon.wrappers.factory_base",
    "Metadataset": "energon_arrow.energon.wrappers.metadatasets",
    "MetadatasetV2": "energon_arrow.energon.wrappers.metadatasets",
    "Batch": "energon_arrow.samples",
    "CaptioningSample": "energon_arrow.samples",
    "Cooker": "energon_arrow.samples",
    "CrudeSample": "energon_arrow.samples",
    "ImageClassificationSample": "energon_arrow.samples",
    "ImageSample": "energon_arrow.samples",
    "InterleavedSample": "energon_arrow.samples",
    "MultiChoiceVQASample": "energon_arrow.samples",
    "OCRSample": "energon_arrow.samples",
    "PartDecoder": "energon_arrow.samples",
    "Sample": "energon_arrow.samples",
    "SampleDecoder": "energon_arrow.samples",
    "SimilarityInterleavedSample": "energon_arrow.samples",
    "SkipSample": "energon_arrow.samples",
    "SourceInfo": "energon_arrow.samples",
    "TextSample": "energon_arrow.samples",
    "VQAOCRSample": "energon_arrow.samples",
    "VQASample": "energon_arrow.samples",
    "VidQASample": "energon_arrow.samples",
    "basic_sample_keys": "energon_arrow.samples",
    "batch_list": "energon_arrow.samples",
    "batch_pad_stack": "energon_arrow.samples",
    "batch_stack": "energon_arrow.samples",
    "concat_pad": "energon_arrow.samples",
    "cooker": "energon_arrow.samples",
    "edataclass": "energon_arrow.samples",
    "generic_batch": "energon_arrow.samples",
    "generic_concat": "energon_arrow.samples",
    "get_stateless": "energon_arrow.samples",
    "homogeneous_concat_mix": "energon_arrow.samples",
    "log_exception": "energon_arrow.samples",
    "reraise_exception": "energon_arrow.samples",
    "stateless": "energon_arrow.samples",
}


def __getattr__(name):
    if name in _LOADER_EXPORTS:
        import importlib

        return getattr(importlib.import_module(_LOADER_EXPORTS[name]), name)
    if name in (
        "bracecollapse",
        "av",
        "media",
    ):  # energon's modules (`from megatron.energon import bracecollapse, av, media`)
        import importlib

        return importlib.import_module(f"energon_arrow.{name}")
    # lazy: importing the package stays cheap; the query layer (DuckDB, pyarrow) loads on first use
    if name == "open_dataset":
        from energon_arrow.query import open_dataset

        return open_dataset
    raise AttributeError(f"module 'energon_arrow' has no attribute {name!r}")
