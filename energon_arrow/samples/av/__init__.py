"""Video and audio decoding with energon's API (PyAV underneath; the `av` extra): AVDecoder, AVData, AVMetadata,
the uniform clip helpers and the part decoder behind SampleDecoder's `av_decode` modes."""

from energon_arrow.samples.av.data import AVData, AVMetadata
from energon_arrow.samples.av.decoder import (
    AV_EXTENSIONS,
    AV_MODES,
    AVDecoder,
    AVDecoderType,
    AVWebdatasetDecoder,
    is_av_part,
)
from energon_arrow.samples.av.uniform import get_clips_uniform, get_single_frames_uniform

__all__ = [
    "AV_EXTENSIONS",
    "AV_MODES",
    "AVData",
    "AVDecoder",
    "AVDecoderType",
    "AVMetadata",
    "AVWebdatasetDecoder",
    "get_clips_uniform",
    "get_single_frames_uniform",
    "is_av_part",
]
