"""Mirrors `megatron.energon.metadataset`: the same public names, from where energon_arrow implements them."""

from energon_arrow.loader.metadataset_api import prepare_metadataset, traverse_metadataset
from energon_arrow.loader.wrappers import DatasetLoader, load_dataset
from energon_arrow.loader.wrappers.factory_base import DatasetLoaderInterface
from energon_arrow.loader.wrappers.metadatasets import Metadataset, MetadatasetV2

__all__ = [
    "DatasetLoader",
    "DatasetLoaderInterface",
    "Metadataset",
    "MetadatasetV2",
    "load_dataset",
    "prepare_metadataset",
    "traverse_metadataset",
]
