"""Mirrors `megatron.energon.metadataset.loader_interface`: the same public names, from where energon_arrow implements them."""

from energon_arrow.energon.metadataset_api import TraversedDatasetReference
from energon_arrow.energon.wrappers.config import DatasetBlendMode, LoadedDataset, LoadedDatasetList
from energon_arrow.energon.wrappers.factory_base import DatasetLoaderInterface

__all__ = [
    "DatasetBlendMode",
    "DatasetLoaderInterface",
    "LoadedDataset",
    "LoadedDatasetList",
    "TraversedDatasetReference",
]
