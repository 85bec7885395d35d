"""Mirrors `megatron.energon.tools.preview`: the same public names, from where energon_arrow implements them."""

from energon_arrow.cli.preview import command

__all__ = ["command"]
