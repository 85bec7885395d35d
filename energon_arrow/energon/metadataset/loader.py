"""Mirrors `megatron.energon.metadataset.loader`: the same public names, from where energon_arrow implements them."""

from energon_arrow.energon.metadataset_api import prepare_metadataset, traverse_metadataset
from energon_arrow.energon.wrappers import load_dataset

__all__ = ["load_dataset", "prepare_metadataset", "traverse_metadataset"]
