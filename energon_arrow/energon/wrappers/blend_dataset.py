"""Mirrors `megatron.energon.wrappers.blend_dataset`: the same public names, from where energon_arrow implements them."""

from energon_arrow.energon.wrappers import BlendDataset

__all__ = ["BlendDataset"]
