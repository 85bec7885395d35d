"""Pure index arithmetic of clip extraction: which frames (in presentation order) each requested range selects,
and which samples of a run of decoded audio frames an audio range selects. energon's rules, whole arrays at once.

Video ranges are inclusive and give at least one frame when they overlap the video:
- by frame number (mp4 / mov, or any container asked in frames): frames `start .. min(stop, n - 1)`; a start at
  or past the last frame selects nothing;
- by timestamp (mkv / webm, or any container asked in seconds; units of the stream's time base): from the first
  frame that ends after `start` through the first frame that ends after `stop` (or the last frame).
Requests in the other unit are converted as energon does (seconds x frame rate, or frames / rate / time base,
truncated to integers), so they may land one frame off; AVDecoder warns about that.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np


def native_ranges(
    ranges: Sequence[tuple[float, float]], unit: str, mode: str, time_base: Fraction, rate: Fraction | None
) -> tuple[str, np.ndarray, np.ndarray, bool]:
    """(`by`, starts, stops, converted): the ranges in the unit the container is read by ("frames" or "pts"),
    as int64 (stop = int64 max for an open end); `converted` when the unit differs from the request's."""
    if unit not in ("frames", "seconds"):
        raise ValueError(f"video_unit must be 'frames' or 'seconds', got {unit!r}")
    by = {"frames": "frames", "pts": "pts"}.get(mode, "frames" if unit == "frames" else "pts")
    if (by == "frames") != (unit == "frames") and rate is None:
        raise ValueError(
            "the video stream has no frame rate: ranges cannot be converted between frames and seconds"
        )
    starts, stops = [], []
    for start, stop in ranges:
        if stop < start:
            raise ValueError(f"video clip range ({start}, {stop}): the end is before the start")
        starts.append(int(_convert(start, by, unit, time_base, rate)))
        stop = _convert(stop, by, unit, time_base, rate)
        stops.append(np.iinfo(np.int64).max if math.isinf(stop) else int(stop))
    if by == "frames" and starts and min(starts) < 0:
        raise ValueError(f"video clip ranges start at negative frame numbers: {min(starts)}")
    return by, np.array(starts, np.int64), np.array(stops, np.int64), (by == "frames") != (unit == "frames")


def _convert(value, by: str, unit: str, time_base: Fraction, rate: Fraction | None):
    """A position in the reading unit: Python arithmetic with the stream's exact fractions, so integer requests
    stay exact and float requests round as energon's do (e.g. 0.3 s / (1/10) s = 2.999... -> frame 2)."""
    if by == "frames":
        return value if unit == "frames" else value * rate
    return value / time_base if unit == "seconds" else value / rate / time_base


def frame_spans(n: int, starts: np.ndarray, stops: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first, last, valid) frame positions of ranges given in frame numbers, for a video of `n` frames."""
    valid = starts < n
    return starts, np.minimum(stops, n - 1), valid


def pts_spans(
    frame_ends: np.ndarray, starts: np.ndarray, stops: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first, last, valid) frame positions of ranges given in time-base units; `frame_ends` = pts + duration of
    the frames in presentation order."""
    reach = np.maximum.accumulate(frame_ends)  # first frame ending after t = first position where reach > t
    first = np.searchsorted(reach, starts, side="right")
    last = np.minimum(np.searchsorted(reach, stops, side="right"), len(frame_ends) - 1)
    valid = first < len(frame_ends)
    return first, np.maximum(first, last), valid


def audio_span(
    times: np.ndarray,
    durations: np.ndarray,
    counts: np.ndarray,
    start: float,
    end: float,
    sample_rate: int,
) -> tuple[int, int, float, float] | None:
    """The samples of decoded audio frames (start times, durations in seconds, sample counts) that the range
    `start .. end` seconds selects: (first, stop) offsets into the frames' concatenated samples and the clip's
    (start, end) time; None when the audio ends at or before `start`.

    The clip starts inside the last frame that begins before `start` (at the nearest sample), or at the first
    frame when none begins before it; it ends inside the first frame that ends at or after `end`, at the nearest
    sample, nudged to exactly round((end - start) x rate) samples when that is one sample away."""
    if len(times) == 0:
        return None
    offsets = np.concatenate(([0], np.cumsum(counts, dtype=np.int64)))
    after = np.flatnonzero(times >= start)
    j = int(after[0]) if len(after) else len(times)
    if j == 0:
        s_idx, first, clip_start = 0, 0, float(times[0])
    else:
        s_idx = j - 1
        first = int(offsets[s_idx]) + int((start - times[s_idx]) * sample_rate + 0.5)
        if j == len(times) and first >= offsets[-1]:
            return None  # starts where the audio ends (or later)
        first, clip_start = min(first, int(offsets[s_idx + 1])), start
    done = np.flatnonzero(times[s_idx:] + durations[s_idx:] >= end)
    if len(done) == 0:
        return first, int(offsets[-1]), clip_start, float(times[-1] + durations[-1])
    k = s_idx + int(done[0])
    stop = int(offsets[k]) + int((end - times[k]) * sample_rate + 0.5)
    if math.isfinite(end):
        wanted = int((end - start) * sample_rate + 0.5)
        if abs(stop - first - wanted) == 1:
            stop = first + wanted
    return first, max(first, min(stop, int(offsets[k + 1]))), clip_start, end
