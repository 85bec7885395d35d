"""Mirrors `megatron.energon.epathlib`: the same public names, from where energon_arrow implements them."""

from energon_arrow.epathlib import EPath

__all__ = ["EPath"]
