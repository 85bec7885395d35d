"""The index arithmetic of clip extraction (samples/av/positions.py): unit conversions with energon's rounding,
frame spans by number and by timestamp, and the samples an audio range selects from decoded frames."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from energon_arrow.samples.av.positions import audio_span, frame_spans, native_ranges, pts_spans

INF = float("inf")
OPEN = np.iinfo(np.int64).max


def test_native_ranges_keep_energons_rounding():
    tb, rate = Fraction(1, 10), Fraction(10)
    # float seconds on a timestamp-indexed stream: 0.3 / 0.1 = 2.999... truncates to 2, as in energon
    by, starts, stops, converted = native_ranges([(0.3, 0.5), (1, INF)], "seconds", "probe", tb, rate)
    assert by == "pts" and starts.tolist() == [2, 10] and stops.tolist() == [5, OPEN] and not converted
    # seconds on a frame-indexed container: x frame rate (0.3 x 10 = 3.0000000000000004 -> 3)
    by, starts, stops, converted = native_ranges([(0.3, 0.5)], "seconds", "frames", tb, rate)
    assert (by, starts.tolist(), stops.tolist(), converted) == ("frames", [3], [5], True)
    # integer frame numbers on a timestamp-indexed container stay exact
    by, starts, stops, converted = native_ranges([(3, 4)], "frames", "pts", Fraction(1, 1000), rate)
    assert (by, starts.tolist(), stops.tolist(), converted) == ("pts", [300], [400], True)


def test_native_ranges_refuse_bad_requests():
    tb, rate = Fraction(1, 10), Fraction(10)
    with pytest.raises(ValueError, match="video_unit"):
        native_ranges([(0, 1)], "samples", "frames", tb, rate)
    with pytest.raises(ValueError, match="end is before the start"):
        native_ranges([(3, 2)], "frames", "frames", tb, rate)
    with pytest.raises(ValueError, match="negative frame"):
        native_ranges([(-2, 2)], "frames", "frames", tb, rate)
    with pytest.raises(ValueError, match="no frame rate"):
        native_ranges([(0, 1)], "seconds", "frames", tb, None)


def test_frame_spans_clamp_to_the_video():
    first, last, valid = frame_spans(12, np.array([0, 3, 10, 12]), np.array([0, 5, OPEN, 20]))
    assert first[valid].tolist() == [0, 3, 10] and last[valid].tolist() == [0, 5, 11] and not valid[3]


def test_pts_spans_cover_the_frames_overlapping_the_range():
    pts = np.arange(0, 1200, 100)  # 12 frames of 100 units
    ends = pts + 100
    first, last, valid = pts_spans(
        ends, np.array([0, 250, 299, 300, 1150, 1200]), np.array([0, 250, 301, 500, OPEN, 1300])
    )
    assert valid.tolist() == [True] * 5 + [False]
    assert first[:5].tolist() == [0, 2, 2, 3, 11]
    # the range's end is inclusive: a frame starting exactly at `stop` is part of the clip
    assert last[:5].tolist() == [0, 2, 3, 5, 11]


def _frames(sizes, rate=1000, t0=0.0):
    counts = np.array(sizes, np.int64)
    times = t0 + np.concatenate(([0], np.cumsum(counts)[:-1])) / rate
    return times, counts / rate, counts


def test_audio_span_crops_frames_at_the_nearest_sample():
    times, durations, counts = _frames([100, 100, 100, 100])
    assert audio_span(times, durations, counts, 0.0, 0.1, 1000) == (0, 100, 0.0, 0.1)
    assert audio_span(times, durations, counts, 0.05, 0.25, 1000) == (50, 250, 0.05, 0.25)
    # open end: through the last frame, which also gives the clip's end time
    first, stop, start, end = audio_span(times, durations, counts, 0.15, INF, 1000)
    assert (first, stop, start) == (150, 400, 0.15) and end == pytest.approx(0.4)
    # a clip inside one frame (energon returns more samples than asked there; see docs/migration.md)
    assert audio_span(times, durations, counts, 0.12, 0.13, 1000) == (120, 130, 0.12, 0.13)
    assert audio_span(times, durations, counts, 0.12, 0.12, 1000) == (120, 120, 0.12, 0.12)


def test_audio_span_edges():
    times, durations, counts = _frames([100, 100], t0=0.02)
    # the first frame starts after the requested start: the clip starts with it
    assert audio_span(times, durations, counts, 0.0, 0.05, 1000)[2] == pytest.approx(0.02)
    assert audio_span(times, durations, counts, 0.22, 0.3, 1000) is None  # starts where the audio ends
    assert audio_span(np.array([]), np.array([]), np.array([], np.int64), 0.0, 1.0, 1000) is None
