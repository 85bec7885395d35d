"""Mirrors `megatron.energon.tools.prepare`: the same public names, from where energon_arrow implements them."""

from energon_arrow.cli.prepare import command

__all__ = ["command"]
