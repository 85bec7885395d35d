"""Mirrors `megatron.energon.flavors.webdataset.base_webdataset`: the same public names, from where energon_arrow implements them."""

from energon_arrow.energon.wrappers.factories import BaseWebdatasetFactory

__all__ = ["BaseWebdatasetFactory"]
