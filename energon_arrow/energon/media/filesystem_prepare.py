"""Mirrors `megatron.energon.media.filesystem_prepare`: the same public names, from where energon_arrow implements them."""

from energon_arrow.index.media_prepare import prepare_filesystem_dataset

__all__ = ["prepare_filesystem_dataset"]
