"""Mirrors `megatron.energon.media.extractor`: the same public names, from where energon_arrow implements them."""

from energon_arrow.index.media_extract import MediaFilterConfig, MediaFilterStrategy

__all__ = ["MediaFilterConfig", "MediaFilterStrategy"]
