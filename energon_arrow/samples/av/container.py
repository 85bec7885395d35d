"""Opening media payloads with PyAV: the import check, single-threaded containers (safe in forked loader workers)
and the file type that decides how positions are resolved (energon's rules)."""

from __future__ import annotations

from typing import Any, BinaryIO

# file types (as the `filetype` package names them) energon reads by frame number, by timestamp, or decodes whole
FRAME_INDEXED = ("mp4", "mov", "m4v")
PTS_INDEXED = ("mkv", "webm")
VIDEO_TYPES = ("mov", "mp4", "webm", "mkv", "avi", "m4v")
AUDIO_TYPES = ("flac", "mp3", "wav")


def require_av() -> Any:
    """The PyAV module, or an ImportError saying how to install it."""
    try:
        import av
    except ImportError:
        raise ImportError(
            "video/audio decoding needs PyAV: pip install 'energon-arrow[av]' (or pip install av filetype)"
        ) from None
    return av


def open_container(stream: BinaryIO) -> Any:
    """A PyAV input container over `stream` (from its start), with codec threads off: FFmpeg threads deadlock
    when a container is freed in a forked worker, and the loader forks."""
    av = require_av()
    stream.seek(0)
    container = av.open(stream, "r")
    try:
        for s in container.streams:
            cc = s.codec_context
            if cc is not None:
                cc.thread_type = "NONE"
                cc.thread_count = 0
    except Exception:
        container.close()
        raise
    return container


def media_type(stream: BinaryIO) -> str | None:
    """The payload's file type from its leading bytes ("mp4", "mkv", "wav", ...), None when not recognised."""
    try:
        import filetype
    except ImportError:
        raise ImportError(
            "video/audio decoding needs the filetype package: pip install 'energon-arrow[av]'"
        ) from None
    stream.seek(0)
    kind = filetype.guess(stream.read(8192))
    stream.seek(0)
    return None if kind is None else kind.extension


def index_mode(kind: str | None) -> str:
    """How video positions are found: "frames" (frame numbers: mp4/mov), "pts" (timestamps: mkv/webm), or "probe"
    (either, by the requested unit)."""
    if kind in FRAME_INDEXED:
        return "frames"
    if kind in PTS_INDEXED:
        return "pts"
    return "probe"
