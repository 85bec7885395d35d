"""Mirrors `megatron.energon.tools.prepare_media`: the same public names, from where energon_arrow implements them."""

from energon_arrow.cli.prepare_media import command

__all__ = ["command"]
