"""Mirrors `megatron.energon.loader`: the same public names, from where energon_arrow implements them."""

from energon_arrow.energon.energon_api import get_loader, get_savable_loader

__all__ = ["get_loader", "get_savable_loader"]
