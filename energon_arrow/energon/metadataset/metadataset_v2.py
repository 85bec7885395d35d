"""Mirrors `megatron.energon.metadataset.metadataset_v2`: the same public names, from where energon_arrow implements them."""

from energon_arrow.energon.wrappers.metadatasets import MetadatasetV2

__all__ = ["MetadatasetV2"]
