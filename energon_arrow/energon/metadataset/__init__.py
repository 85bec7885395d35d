"""Mirrors `megatron.energon.metadataset`: the same public names, from where energon_arrow implements them."""

from energon_arrow.energon.metadataset_api import prepare_metadataset, traverse_metadataset
from energon_arrow.energon.wrappers import DatasetLoader, load_dataset
from energon_arrow.energon.wrappers.factory_base import DatasetLoaderInterface
from energon_arrow.energon.wrappers.metadatasets import Metadataset, MetadatasetV2

__all__ = [
    "DatasetLoader",
    "DatasetLoaderInterface",
    "Metadataset",
    "MetadatasetV2",
    "load_dataset",
    "prepare_metadataset",
    "traverse_metadataset",
]
