"""Video clips from a container: a packet scan gives the frames' timestamps and keyframes without decoding, the
requested ranges become frame spans (samples/av/positions.py), and only the frames those spans need are
decoded, seeking to the keyframe before each run of them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from energon_arrow.samples.av.positions import frame_spans, native_ranges, pts_spans


@dataclass(frozen=True)
class FrameTable:
    """The video stream's frames in presentation order: pts, duration (time-base units), keyframe flags, and the
    decode timestamp of each (seek targets)."""

    pts: np.ndarray
    duration: np.ndarray
    keyframe: np.ndarray
    dts: np.ndarray


def scan_frames(container, stream) -> FrameTable:
    """Every packet of `stream` with a timestamp (demuxed, not decoded)."""
    rows = [
        (p.pts, p.duration or 0, p.is_keyframe, p.pts if p.dts is None else p.dts)
        for p in container.demux(stream)
        if p.pts is not None
    ]
    table = np.array(rows, dtype=np.int64).reshape(-1, 4)
    table = table[np.argsort(table[:, 0], kind="stable")]
    container.seek(0)
    return FrameTable(table[:, 0], table[:, 1], table[:, 2].astype(bool), table[:, 3])


def _rgb(frame, size: tuple[int, int] | None) -> np.ndarray:
    if size is None:
        return frame.reformat(format="rgb24").to_ndarray()
    return frame.reformat(
        width=size[0], height=size[1], format="rgb24", interpolation="BILINEAR"
    ).to_ndarray()


def decode_frames(container, stream, table: FrameTable, positions: np.ndarray, size) -> dict[int, tuple]:
    """{position: (rgb array HWC, pts, duration)} for the sorted unique frame `positions`."""
    keys = np.flatnonzero(table.keyframe)
    out: dict[int, tuple] = {}
    frames, last = None, -1
    for p in positions.tolist():
        k = keys[np.searchsorted(keys, p, side="right") - 1] if len(keys) and keys[0] <= p else 0
        if frames is None or k > last:
            frames, last = _seek(container, stream, table, int(k), p), -1
        for frame in frames:
            if frame.pts is None:
                raise ValueError("a decoded video frame has no timestamp")
            pos = int(np.searchsorted(table.pts, frame.pts))
            if pos >= len(table.pts) or table.pts[pos] != frame.pts:
                raise ValueError(
                    f"decoded video frame pts {frame.pts} is not a packet timestamp of the stream"
                )
            last = pos
            if pos == p:
                out[p] = (_rgb(frame, size), frame.pts, frame.duration)
                break
            if pos > p:
                raise ValueError(f"video frame {p} (pts {table.pts[p]}) was not produced by the decoder")
        else:
            raise ValueError(f"video frame {p} (pts {table.pts[p]}) was not produced by the decoder")
    return out


def _seek(container, stream, table: FrameTable, key: int, p: int):
    """A frame iterator started at the keyframe `key` (or earlier, when the demuxer's seek lands after it)."""
    # a backward seek to the keyframe's pts lands on it whether the demuxer indexes by pts (mkv) or dts (mp4)
    container.seek(int(table.pts[key]), stream=stream, backward=True)
    frames = container.decode(stream)
    first = next(frames, None)
    if first is not None and (first.pts is None or first.pts > table.pts[p]):
        container.seek(0)  # the demuxer overshot: decode from the stream's start
        frames = container.decode(stream)
        first = next(frames, None)
    return frames if first is None else _chain(first, frames)


def _chain(first, rest):
    yield first
    yield from rest


def video_clips(
    container,
    mode: str,
    ranges: Sequence[tuple[float, float]],
    unit: str,
    size: tuple[int, int] | None,
    frame_table: Callable[[Any, Any], FrameTable] = scan_frames,
) -> tuple[list[torch.Tensor], list[tuple[float, float]], bool]:
    """(clips, timestamps, converted) for `ranges` of the first video stream; ranges that select no frame are
    left out (as energon does). `converted`: the ranges were given in the unit the container is not indexed by.
    `frame_table(container, stream)` gives the stream's FrameTable (a scan, or a cached one)."""
    if not container.streams.video:
        raise ValueError("the media has no video stream, but video clips were requested")
    stream = container.streams.video[0]
    by, starts, stops, converted = native_ranges(ranges, unit, mode, stream.time_base, stream.average_rate)
    table = frame_table(container, stream)
    n = len(table.pts)
    if n == 0:
        return [], [], converted
    if by == "frames":
        first, last, valid = frame_spans(n, starts, stops)
    else:
        first, last, valid = pts_spans(table.pts + table.duration, starts, stops)
    first, last = first[valid], last[valid]
    counts = last - first + 1
    members = np.repeat(first - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
    decoded = decode_frames(container, stream, table, np.unique(members), size)
    tb = stream.time_base
    clips, stamps = [], []
    for a, b in zip(first.tolist(), last.tolist()):
        clip = np.stack([decoded[i][0] for i in range(a, b + 1)])
        clips.append(torch.from_numpy(clip).permute(0, 3, 1, 2))
        end = decoded[b]
        stamps.append((float(decoded[a][1] * tb), float((end[1] + end[2]) * tb)))
    return clips, stamps, converted
