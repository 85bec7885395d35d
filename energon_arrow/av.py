"""energon's `megatron.energon.av` names: `from energon_arrow.av import AVDecoder, get_clips_uniform` (see
samples/av; decoding needs the `av` extra)."""

from energon_arrow.samples.av import (
    AVData,
    AVDecoder,
    AVDecoderType,
    AVMetadata,
    AVWebdatasetDecoder,
    get_clips_uniform,
    get_single_frames_uniform,
)

__all__ = [
    "AVData",
    "AVDecoder",
    "AVDecoderType",
    "AVMetadata",
    "AVWebdatasetDecoder",
    "get_clips_uniform",
    "get_single_frames_uniform",
]
