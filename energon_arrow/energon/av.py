"""Mirrors `megatron.energon.av`: the same public names, from where energon_arrow implements them."""

from energon_arrow.samples.av.data import AVData
from energon_arrow.samples.av.decoder import AVDecoder, AVWebdatasetDecoder
from energon_arrow.samples.av.uniform import get_clips_uniform, get_single_frames_uniform

__all__ = ["AVData", "AVDecoder", "AVWebdatasetDecoder", "get_clips_uniform", "get_single_frames_uniform"]
