"""Mirrors `megatron.energon.edataclass`: the same public names, from where energon_arrow implements them."""

from energon_arrow.samples import edataclass

__all__ = ["edataclass"]
