"""`AVMetadata` of a container: header values first, falling back to scanning packets (or decoding the audio)
where the header lacks them and the caller asked for them (energon's get_metadata flags)."""

from __future__ import annotations

from collections.abc import Callable

from energon_arrow.samples.av.data import AVMetadata
from energon_arrow.samples.av.video import scan_frames


def _seconds(value: int | None, stream) -> float | None:
    """A stream-time-base duration minus the stream's start time, in seconds (None stays None)."""
    if value is None:
        return None
    if stream.start_time is not None:
        value -= stream.start_time
    return value * float(stream.time_base) if stream.time_base is not None else value


def video_metadata(
    container, md: AVMetadata, duration: bool, frame_count: bool, frame_size: bool, frame_table: Callable
) -> None:
    stream = container.streams.video[0]
    length = stream.duration
    if (duration and length is None) or frame_count:
        table = frame_table(container, stream)
        md.video_num_frames = len(table.pts)
        if length is None and duration and len(table.pts):
            length = int((table.pts + table.duration).max())
    md.video_duration = _seconds(length, stream)
    if stream.average_rate is not None:
        md.video_fps = float(stream.average_rate)
    elif md.video_num_frames and md.video_duration:
        md.video_fps = md.video_num_frames / md.video_duration
    if frame_size:
        container.seek(0)
        first = next(iter(container.decode(stream)), None)
        src = stream if first is None else first
        md.video_width, md.video_height = src.width, src.height


def audio_metadata(container, md: AVMetadata, duration: bool, num_samples: bool) -> None:
    stream = container.streams.audio[0]
    md.audio_sample_rate = stream.sample_rate
    md.audio_channels = stream.codec_context.channels
    length = stream.duration
    if num_samples:
        container.seek(0)
        total, last = 0, None
        for frame in container.decode(stream):
            total += frame.samples
            if frame.pts is not None:
                last = frame
        md.audio_num_samples = total
        if last is not None and last.duration is not None:
            length = last.pts + last.duration
    if duration and length is None:
        container.seek(0)
        last = None
        for packet in container.demux(stream):
            if packet.pts is not None:
                last = packet
        if last is not None and last.duration is not None:
            length = last.pts + last.duration
    md.audio_duration = _seconds(length, stream)


def read_metadata(
    container,
    video: bool = True,
    video_duration: bool = True,
    video_frame_count: bool = True,
    video_frame_size: bool = True,
    audio: bool = True,
    audio_duration: bool = True,
    audio_num_samples: bool = False,
    frame_table: Callable = scan_frames,
) -> AVMetadata:
    """The metadata of the first video and first audio stream (each when present and asked for);
    `frame_table(container, stream)` gives the video's FrameTable when a packet scan is needed."""
    md = AVMetadata()
    if video and container.streams.video:
        video_metadata(container, md, video_duration, video_frame_count, video_frame_size, frame_table)
    if audio and container.streams.audio:
        audio_metadata(container, md, audio_duration, audio_num_samples)
    return md
