"""Mirrors `megatron.energon.source_info`: the same public names, from where energon_arrow implements them."""

from energon_arrow.samples import SourceInfo

__all__ = ["SourceInfo"]
