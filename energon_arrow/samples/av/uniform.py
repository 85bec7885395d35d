"""energon's clip sampling helpers: equally long clips at equal distances (`get_clips_uniform`) and single frames
at equal distances (`get_single_frames_uniform`)."""

from __future__ import annotations

import numpy as np
import torch

from energon_arrow.samples.av.data import AVData
from energon_arrow.samples.av.decoder import AVDecoder


def get_clips_uniform(
    av_decoder: AVDecoder,
    clip_duration_seconds: float,
    num_clips: int,
    request_video: bool = False,
    request_audio: bool = False,
    video_out_frame_size: tuple[int, int] | None = None,
) -> AVData:
    """`num_clips` clips of `clip_duration_seconds`, the first starting at 0 and the last ending at the end of the
    shorter of the requested streams. A duration of 0 gives single frames, the first and last centred on the first
    and last frame."""
    if not request_video and not request_audio:
        raise ValueError("get_clips_uniform: request video, audio or both (request_video / request_audio)")
    total = float("inf")
    if request_video:
        video_duration, _ = av_decoder.get_video_duration()
        if video_duration is None:
            raise ValueError("get_clips_uniform: the video's duration is not known")
        total = video_duration
    if request_audio:
        audio_duration = av_decoder.get_audio_duration()
        if audio_duration is None:
            raise ValueError("get_clips_uniform: the audio's duration is not known")
        total = min(total, audio_duration)
    if clip_duration_seconds == 0:
        half_frame = 0.5 / av_decoder.get_video_fps()
        first, last = half_frame, total - half_frame
    else:
        first, last = 0, total - clip_duration_seconds
    ranges = [
        (float(start), float(start + clip_duration_seconds)) for start in np.linspace(first, last, num_clips)
    ]
    return av_decoder.get_clips(
        video_clip_ranges=ranges if request_video else None,
        audio_clip_ranges=ranges if request_audio else None,
        video_unit="seconds",
        audio_unit="seconds",
        video_out_frame_size=video_out_frame_size,
    )


def get_single_frames_uniform(
    av_decoder: AVDecoder,
    num_frames: int,
    *,
    video_out_frame_size: tuple[int, int] | None = None,
    return_timestamps: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, list[float]]:
    """`num_frames` frames at equal distances as one (frames, 3, height, width) tensor (and, with
    `return_timestamps`, each frame's start in seconds)."""
    data = get_clips_uniform(
        av_decoder,
        clip_duration_seconds=0,
        num_clips=num_frames,
        request_video=True,
        video_out_frame_size=video_out_frame_size,
    )
    if not data.video_clips:
        raise ValueError("get_single_frames_uniform: no video frames found")
    frames = torch.cat(data.video_clips, dim=0)
    return (frames, [start for start, _ in data.video_timestamps]) if return_timestamps else frames
