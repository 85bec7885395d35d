"""Mirrors `megatron.energon.cli.main`: the same public names, from where energon_arrow implements them."""

from energon_arrow.cli.prepare_media import command as prepare_media_command

__all__ = ["prepare_media_command"]
