"""Mirrors `megatron.energon.flavors.webdataset.default_generic_webdataset`: the same public names, from where energon_arrow implements them."""

from energon_arrow.energon.wrappers.factories import DefaultGenericWebdatasetFactory

__all__ = ["DefaultGenericWebdatasetFactory"]
