"""The value types of energon's AV decoding: `AVData` (decoded clips with their timestamps) and `AVMetadata`
(what a media file's streams hold; defined with the other media metadata in index/media_metadata.py)."""

from __future__ import annotations

import torch

from energon_arrow.index.media_metadata import AVMetadata
from energon_arrow.samples.sample import edataclass

__all__ = ["AVData", "AVMetadata"]


@edataclass
class AVData:
    """Decoded clips. Video clips are uint8 tensors (frames, channels, height, width), RGB; audio clips are
    tensors (channels, samples) in the decoder's sample format (e.g. int16 for 16-bit PCM, float32 for AAC).
    Timestamps are (start, end) in seconds, one per clip."""

    video_clips: list[torch.Tensor] | None
    video_timestamps: list[tuple[float, float]] | None
    audio_clips: list[torch.Tensor] | None
    audio_timestamps: list[tuple[float, float]] | None
