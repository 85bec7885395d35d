"""The value types of energon's AV decoding: `AVData` (decoded clips with their timestamps) and `AVMetadata`
(what a media file's streams hold)."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import torch

from energon_arrow.samples.sample import edataclass


@edataclass
class AVData:
    """Decoded clips. Video clips are uint8 tensors (frames, channels, height, width), RGB; audio clips are
    tensors (channels, samples) in the decoder's sample format (e.g. int16 for 16-bit PCM, float32 for AAC).
    Timestamps are (start, end) in seconds, one per clip."""

    video_clips: list[torch.Tensor] | None
    video_timestamps: list[tuple[float, float]] | None
    audio_clips: list[torch.Tensor] | None
    audio_timestamps: list[tuple[float, float]] | None


@edataclass
class AVMetadata:
    """Metadata of a video or audio file (energon's fields; None where not known or not requested)."""

    metadata_type: ClassVar[str] = "av"

    video_duration: float | None = None
    video_num_frames: int | None = None
    video_fps: float | None = None
    video_width: int | None = None
    video_height: int | None = None

    audio_duration: float | None = None
    audio_channels: int | None = None
    audio_sample_rate: int | None = None
    audio_num_samples: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The fields that are set, as a JSON-able dict."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, payload: dict[str, Any]) -> AVMetadata:
        return cls(**payload)
