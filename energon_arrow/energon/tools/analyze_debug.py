"""Mirrors `megatron.energon.tools.analyze_debug`: the same public names, from where energon_arrow implements them."""

from energon_arrow.cli.analyze_debug import command

__all__ = ["command"]
