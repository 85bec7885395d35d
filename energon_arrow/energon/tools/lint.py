"""Mirrors `megatron.energon.tools.lint`: the same public names, from where energon_arrow implements them."""

from energon_arrow.cli.lint import command

__all__ = ["command"]
