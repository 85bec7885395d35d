"""energon's `AVDecoder` (a media payload, decoded on request: clips by frame number or time, audio clips,
metadata) and `AVWebdatasetDecoder` (the part decoder behind SampleDecoder's `av_decode` modes)."""

from __future__ import annotations

import io
import warnings
from collections.abc import Sequence
from typing import Any, BinaryIO, Literal

from energon_arrow.samples.av.audio import audio_clips
from energon_arrow.samples.av.container import (
    AUDIO_TYPES,
    VIDEO_TYPES,
    index_mode,
    media_type,
    open_container,
    require_av,
)
from energon_arrow.samples.av.data import AVData, AVMetadata
from energon_arrow.samples.av.metadata import read_metadata
from energon_arrow.samples.av.video import FrameTable, scan_frames, video_clips

AVDecoderType = Literal["torch", "AVDecoder", "pyav"]
AV_MODES = ("torch", "AVDecoder", "pyav")
# part names decoded as media (a name equal to one of these or ending in "." + one of them, any case)
AV_EXTENSIONS = ("mp4", "avi", "mov", "webm", "mkv", "flac", "mp3", "wav", "flv")
_ALL = [(0, float("inf"))]


class AVDecoder:
    """A video or audio payload (a binary stream), decoded only when asked: `get_clips`, `get_video_clips`,
    `get_audio_clips`, the whole `get_video` / `get_audio` / `get_video_with_audio`, `get_frames`, and metadata.
    Picklable (the stream travels with it). Video clips are uint8 (frames, 3, height, width) RGB tensors, audio
    clips (channels, samples) tensors in the stream's sample format."""

    def __init__(self, stream: BinaryIO, suppress_warnings: bool = False) -> None:
        require_av()
        if "t" in getattr(stream, "mode", "rb") or isinstance(stream, io.TextIOBase):
            raise ValueError("AVDecoder needs a binary stream, not one opened in text mode")
        self.stream = stream
        self.suppress_warnings = suppress_warnings
        self._frames: FrameTable | None = None  # the video's packet scan, made once per decoder

    def _frame_table(self, container, stream) -> FrameTable:
        if self._frames is None:
            self._frames = scan_frames(container, stream)
        return self._frames

    def __repr__(self) -> str:
        return f"AVDecoder(stream={self.stream!r})"

    def _warn_converted(self, unit: str) -> None:
        if not self.suppress_warnings:
            indexed = "frame numbers" if unit == "seconds" else "timestamps"
            warnings.warn(
                f"video clip ranges in {unit} on a container indexed by {indexed}: converted with the frame rate,"
                " the frames may be one off",
                RuntimeWarning,
                stacklevel=3,
            )

    def get_video_clips(
        self,
        video_clip_ranges: Sequence[tuple[float, float]],
        video_unit: Literal["frames", "seconds"] = "seconds",
        video_out_frame_size: tuple[int, int] | None = None,
    ) -> tuple[list, list[tuple[float, float]]]:
        """(clips, (start, end) seconds of each) for inclusive ranges in `video_unit`; every range that overlaps
        the video gives at least one frame, the others are left out. `video_out_frame_size`: (width, height) to
        resize to (bilinear)."""
        mode = index_mode(media_type(self.stream))
        with open_container(self.stream) as container:
            clips, stamps, converted = video_clips(
                container, mode, video_clip_ranges, video_unit, video_out_frame_size, self._frame_table
            )
        if converted:
            self._warn_converted(video_unit)
        return clips, stamps

    def get_audio_clips(
        self,
        audio_clip_ranges: Sequence[tuple[float, float]],
        audio_unit: Literal["samples", "seconds"] = "seconds",
    ) -> tuple[list, list[tuple[float, float]]]:
        """(clips, (start, end) seconds of each) for ranges in `audio_unit`; ranges past the end are left out."""
        with open_container(self.stream) as container:
            return audio_clips(container, audio_clip_ranges, audio_unit)

    def get_clips(
        self,
        video_clip_ranges: Sequence[tuple[float, float]] | None = None,
        audio_clip_ranges: Sequence[tuple[float, float]] | None = None,
        video_unit: Literal["frames", "seconds"] = "seconds",
        audio_unit: Literal["samples", "seconds"] = "seconds",
        video_out_frame_size: tuple[int, int] | None = None,
    ) -> AVData:
        """Video and/or audio clips (a stream not asked for gives empty lists)."""
        video, video_ts = [], []
        audio, audio_ts = [], []
        if video_clip_ranges is not None:
            video, video_ts = self.get_video_clips(video_clip_ranges, video_unit, video_out_frame_size)
        if audio_clip_ranges is not None:
            audio, audio_ts = self.get_audio_clips(audio_clip_ranges, audio_unit)
        return AVData(
            video_clips=video, video_timestamps=video_ts, audio_clips=audio, audio_timestamps=audio_ts
        )

    def get_video(self) -> AVData:
        """All frames, as one clip (no audio)."""
        return self.get_clips(video_clip_ranges=_ALL)

    def get_audio(self) -> AVData:
        """All audio samples, as one clip."""
        return self.get_clips(audio_clip_ranges=_ALL)

    def get_video_with_audio(self) -> AVData:
        """All frames and all audio samples, one clip each."""
        return self.get_clips(video_clip_ranges=_ALL, audio_clip_ranges=_ALL)

    def get_frames(self, video_decode_audio: bool = False) -> AVData | None:
        """The whole payload decoded by its detected type: videos (mp4, mov, m4v, mkv, webm, avi) give their frames
        (and, with `video_decode_audio`, their audio when they have an audio stream), audio files (flac, mp3, wav)
        their samples; None for any other type."""
        kind = media_type(self.stream)
        if kind in VIDEO_TYPES:
            if video_decode_audio and self.has_audio_stream():
                return self.get_video_with_audio()
            return self.get_video()
        if kind in AUDIO_TYPES:
            return self.get_audio()
        return None

    def has_audio_stream(self) -> bool:
        with open_container(self.stream) as container:
            return len(container.streams.audio) > 0

    def has_video_stream(self) -> bool:
        with open_container(self.stream) as container:
            return len(container.streams.video) > 0

    def get_metadata(
        self,
        get_video: bool = True,
        get_video_duration: bool = True,
        get_video_frame_count: bool = True,
        get_video_frame_size: bool = True,
        get_audio: bool = True,
        get_audio_duration: bool = True,
        get_audio_num_samples: bool = False,
    ) -> AVMetadata:
        """The media's metadata. The `get_...` flags allow the costlier fallbacks when the header lacks a value
        (packet scans; `get_audio_num_samples` decodes the audio)."""
        with open_container(self.stream) as container:
            return read_metadata(
                container,
                video=get_video,
                video_duration=get_video_duration,
                video_frame_count=get_video_frame_count,
                video_frame_size=get_video_frame_size,
                audio=get_audio,
                audio_duration=get_audio_duration,
                audio_num_samples=get_audio_num_samples,
                frame_table=self._frame_table,
            )

    def get_video_fps(self) -> float:
        md = self.get_metadata(
            get_video_duration=False, get_video_frame_count=False, get_video_frame_size=False, get_audio=False
        )
        if md.video_fps is None:
            raise ValueError("the media has no video stream with a frame rate")
        return md.video_fps

    def get_audio_samples_per_second(self) -> int:
        md = self.get_metadata(get_video=False, get_audio_duration=False)
        if md.audio_sample_rate is None:
            raise ValueError("the media has no audio stream")
        return md.audio_sample_rate

    def get_audio_duration(self) -> float | None:
        """Seconds of audio (None without an audio stream or when unknown)."""
        return self.get_metadata(get_video=False).audio_duration

    def get_video_duration(self, get_frame_count: bool = False) -> tuple[float | None, int | None]:
        """(seconds, frame count); the count is None unless `get_frame_count` or the duration needed a scan."""
        md = self.get_metadata(
            get_video_frame_count=get_frame_count, get_video_frame_size=False, get_audio=False
        )
        return md.video_duration, md.video_num_frames


def is_av_part(name: str) -> bool:
    """Whether a part name (e.g. "mp4", "clip.WAV") is decoded as media."""
    name = name.lower()
    return any(name == ext or name.endswith("." + ext) for ext in AV_EXTENSIONS)


class AVWebdatasetDecoder:
    """Decodes media parts by name: `av_decode="AVDecoder"` gives an AVDecoder, "pyav" a PyAV input container,
    "torch" the decoded AVData (see AVDecoder.get_frames; None for undetected types). Other names give None."""

    def __init__(self, video_decode_audio: bool, av_decode: AVDecoderType = "AVDecoder") -> None:
        if av_decode not in AV_MODES:
            raise ValueError(f"av_decode must be one of {AV_MODES}, got {av_decode!r}")
        self.video_decode_audio = video_decode_audio
        self.av_decode = av_decode

    def read_av_data(self, data: bytes) -> AVDecoder:
        return AVDecoder(io.BytesIO(bytes(data)))

    def decode_payload(self, data) -> Any:
        """A media payload decoded by `av_decode` (whatever its name)."""
        decoder = self.read_av_data(data)
        if self.av_decode == "AVDecoder":
            return decoder
        if self.av_decode == "pyav":
            return open_container(decoder.stream)
        return decoder.get_frames(video_decode_audio=self.video_decode_audio)

    def __call__(self, key: str, data: bytes) -> Any:
        """The decoded payload of a part named `key` (e.g. "mp4"), None for names that are not media."""
        return self.decode_payload(data) if is_av_part(key) else None
