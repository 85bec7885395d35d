"""Mirrors `megatron.energon.tools.info`: the same public names, from where energon_arrow implements them."""

from energon_arrow.cli.info import command

__all__ = ["command"]
