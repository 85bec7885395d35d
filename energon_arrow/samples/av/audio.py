"""Audio clips from a container: for each range, seek to its start, decode frames until one ends at or after the
range's end, and cut the samples the range selects (samples/av/positions.py: audio_span)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from energon_arrow.samples.av.positions import audio_span


def frame_samples(frame) -> np.ndarray:
    """An audio frame's samples as (channels, samples) in its own sample format."""
    arr = frame.to_ndarray()
    if frame.format.is_planar:
        return arr
    return arr.reshape(int(frame.samples), int(frame.layout.nb_channels)).T


def _decode_from(container, stream, start: float, end: float):
    """(times, durations, sample arrays) of the frames decoded after seeking to `start` seconds, through the first
    frame that ends at or after `end`."""
    av_time_base = 1_000_000  # FFmpeg's AV_TIME_BASE: container seeks without a stream are in microseconds
    container.seek(int(start * av_time_base))
    times, durations, arrays = [], [], []
    for frame in container.decode(stream):
        if frame.pts is None:
            raise ValueError("a decoded audio frame has no timestamp")
        t, d = float(frame.pts * frame.time_base), float(frame.duration * frame.time_base)
        times.append(t)
        durations.append(d)
        arrays.append(frame_samples(frame))
        if t + d >= end and t + d > start:
            break
    return np.array(times, np.float64), np.array(durations, np.float64), arrays


def audio_clips(
    container, ranges: Sequence[tuple[float, float]], unit: str
) -> tuple[list[torch.Tensor], list[tuple[float, float]]]:
    """(clips, timestamps) of the first audio stream for `ranges` in "seconds" or "samples"; a range starting at or
    after the end of the audio gives no clip (left out, as energon does)."""
    if unit not in ("samples", "seconds"):
        raise ValueError(f"audio_unit must be 'samples' or 'seconds', got {unit!r}")
    if not container.streams.audio:
        raise ValueError("the media has no audio stream, but audio clips were requested")
    stream = container.streams.audio[0]
    rate = stream.sample_rate
    if not rate:
        raise ValueError("the audio stream has no sample rate")
    clips, stamps = [], []
    for start, end in ranges:
        if unit == "samples":
            start, end = float(start / rate), float(end / rate)
        if end < start:
            raise ValueError(f"audio clip range ({start}, {end}): the end is before the start")
        times, durations, arrays = _decode_from(container, stream, start, end)
        counts = np.array([a.shape[1] for a in arrays], np.int64)
        span = audio_span(times, durations, counts, start, end, rate)
        if span is None:
            continue
        first, stop, clip_start, clip_end = span
        samples = np.concatenate(arrays, axis=1)[:, first:stop]
        clips.append(torch.from_numpy(np.ascontiguousarray(samples)))
        stamps.append((clip_start, clip_end))
    return clips, stamps
