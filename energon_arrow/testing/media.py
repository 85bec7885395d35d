"""Tiny video and audio files made with PyAV, with content a test can predict: frame i of a video is one flat
grey level (`frame_level(i)`, robust to lossy codecs and resizing), audio is a sine tone per channel
(`tone(...)`, exact int16 samples for the lossless containers wav and flac)."""

from __future__ import annotations

import io

import numpy as np

# container -> (format name for av.open, video codec, audio codec)
VIDEO_FORMATS = {
    "mp4": ("mp4", "libx264", "aac"),
    "mov": ("mov", "libx264", "aac"),
    "mkv": ("matroska", "libx264", "flac"),
    "webm": ("webm", "libvpx-vp9", "libopus"),
    "avi": ("avi", "mpeg4", "mp3"),
}
AUDIO_FORMATS = {"wav": "pcm_s16le", "flac": "flac", "mp3": "libmp3lame"}


def frame_level(i: int) -> int:
    """The grey level of frame `i`."""
    return (16 + 18 * i) % 224


def tone(sample_rate: int, num_samples: int, channels: int = 1) -> np.ndarray:
    """(channels, samples) int16: channel c is a (220 x (c + 1)) Hz sine at half amplitude."""
    t = np.arange(num_samples) / sample_rate
    freqs = 220.0 * np.arange(1, channels + 1)[:, None]
    return np.round(16383 * np.sin(2 * np.pi * freqs * t)).astype(np.int16)


def _encode_audio(container, stream, samples: np.ndarray, layout: str) -> None:
    """Encode int16 (channels, n) samples into `stream` in the codec's own sample format."""
    import av

    fmt = stream.codec_context.format.name
    step = stream.codec_context.frame_size or 1024
    for k in range(0, samples.shape[1], step):
        chunk = samples[:, k : k + step]
        if fmt in ("s16", "s16p"):
            arr = chunk if fmt == "s16p" else chunk.T.reshape(1, -1)
        elif fmt in ("flt", "fltp"):
            flt = (chunk / 32768).astype(np.float32)
            arr = flt if fmt == "fltp" else flt.T.reshape(1, -1)
        elif fmt in ("s32", "s32p"):
            wide = chunk.astype(np.int32) << 16
            arr = wide if fmt == "s32p" else wide.T.reshape(1, -1)
        else:
            raise ValueError(f"unsupported encoder sample format {fmt}")
        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(arr), format=fmt, layout=layout)
        frame.sample_rate, frame.pts = stream.rate, k
        for packet in stream.encode(frame):
            container.mux(packet)
    for packet in stream.encode():
        container.mux(packet)


def video_bytes(
    kind: str = "mp4",
    frames: int = 12,
    size: tuple[int, int] = (32, 48),
    fps: int = 10,
    gop: int = 4,
    audio_rate: int | None = None,
) -> bytes:
    """A video file of `frames` flat frames (height, width = `size`), a keyframe every `gop` frames (B-frames with
    x264), and with `audio_rate` a mono tone track lasting as long as the video."""
    import av

    fmt, vcodec, acodec = VIDEO_FORMATS[kind]
    buf = io.BytesIO()
    with av.open(buf, "w", format=fmt) as container:
        stream = container.add_stream(vcodec, rate=fps)
        stream.height, stream.width = size
        stream.pix_fmt = "yuv420p"
        stream.codec_context.gop_size = gop
        if vcodec == "libx264":
            stream.codec_context.options = {"bf": "2"}
        audio = None
        if audio_rate is not None:
            audio = container.add_stream(acodec, rate=audio_rate)
            audio.layout = "mono"
        for i in range(frames):
            img = np.full((*size, 3), frame_level(i), np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
        if audio is not None:
            _encode_audio(container, audio, tone(audio_rate, audio_rate * frames // fps), "mono")
    return buf.getvalue()


def audio_bytes(kind: str = "wav", seconds: float = 1.0, sample_rate: int = 8000, channels: int = 1) -> bytes:
    """An audio file of `tone(sample_rate, seconds x sample_rate, channels)`."""
    import av

    layout = {1: "mono", 2: "stereo"}[channels]
    buf = io.BytesIO()
    with av.open(buf, "w", format=kind) as container:
        stream = container.add_stream(AUDIO_FORMATS[kind], rate=sample_rate)
        stream.layout = layout
        _encode_audio(container, stream, tone(sample_rate, int(seconds * sample_rate), channels), layout)
    return buf.getvalue()


def image_bytes(fmt: str = "PNG", size: tuple[int, int] = (24, 16), mode: str = "RGB") -> bytes:
    """A flat grey image of (width, height) `size` encoded as `fmt` (a Pillow format name)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.new(mode, size, 128 if mode in ("L", "P", "1") else None).save(buf, fmt)
    return buf.getvalue()


def media_samples(shard: int) -> list[tuple[str, dict[str, bytes]]]:
    """The samples of shard `shard` of a small multimedia WebDataset (media metadata tests): images of several
    formats and modes (one under an upper-case and one under a dotted part name, one PNG without a media extension),
    a short mp4 with an audio track, wav and flac audio and text parts."""
    return [
        (f"s{shard}/a000", {"jpg": image_bytes("JPEG", (32, 16)), "txt": b"caption"}),
        (f"s{shard}/a001", {"png": image_bytes("PNG", (24, 24), "RGBA"), "txt": b"x"}),
        (
            f"s{shard}/a002",
            {"seg.webp": image_bytes("WEBP", (7, 9), "L"), "JPG": image_bytes("JPEG", (5, 4))},
        ),
        (
            f"s{shard}/a003",
            {"mp4": video_bytes("mp4", frames=6, audio_rate=16000), "wav": audio_bytes("wav", 0.5)},
        ),
        (
            f"s{shard}/a004",
            {
                "bin": image_bytes("PNG", (3, 3)),
                "flac": audio_bytes("flac", 0.25),
                "gif": image_bytes("GIF", (6, 5), "P"),
            },
        ),
    ]


def write_media_webdataset(root: str, shards: int = 2) -> None:
    """`shards` tar shards `shard<i>.tar` of `media_samples(i)` under `root`."""
    import os

    from energon_arrow.testing.synthetic import tar_of_samples

    os.makedirs(root, exist_ok=True)
    for i in range(shards):
        with open(os.path.join(root, f"shard{i}.tar"), "wb") as f:
            f.write(tar_of_samples(media_samples(i)))


def write_media_folder(root: str) -> None:
    """A plain folder of media files (a filesystem dataset): images in a sub folder too, one PNG without extension,
    a video, a text file and a broken `.jpg`."""
    import os

    files = {
        "a.jpg": image_bytes("JPEG", (10, 20)),
        "sub/b.PNG": image_bytes("PNG", (3, 4), "LA"),
        "sub/c.gif": image_bytes("GIF", (6, 6), "P"),
        "clip.mkv": video_bytes("mkv", frames=5, audio_rate=16000),
        "noext": image_bytes("PNG", (2, 2)),
        "notes.txt": b"hello",
        "bad.jpg": b"not an image",
    }
    for rel, data in files.items():
        os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
        with open(os.path.join(root, rel), "wb") as f:
            f.write(data)
