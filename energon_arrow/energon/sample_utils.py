"""Mirrors `megatron.energon.sample_utils`: the same public names, from where energon_arrow implements them."""

from energon_arrow.energon.wrappers.map import default_get_batch_keys

__all__ = ["default_get_batch_keys"]
