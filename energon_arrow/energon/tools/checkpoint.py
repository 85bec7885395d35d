"""Mirrors `megatron.energon.tools.checkpoint`: the same public names, from where energon_arrow implements them."""

from energon_arrow.cli.checkpoint import command, command_info, command_redist

__all__ = ["command", "command_info", "command_redist"]
