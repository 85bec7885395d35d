"""AVDecoder on tiny generated media: frames by number and by time (each frame is one known grey level),
timestamps, resizing, audio samples (exact for wav / flac), metadata, the uniform helpers, pickling, errors."""

from __future__ import annotations

import io
import pickle
import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("av")
pytest.importorskip("filetype")

from energon_arrow.av import AVData, AVDecoder, AVMetadata, get_clips_uniform, get_single_frames_uniform  # noqa: E402
from energon_arrow.testing.media import VIDEO_FORMATS, audio_bytes, frame_level, tone, video_bytes  # noqa: E402

FRAMES, FPS = 12, 10


@pytest.fixture(scope="module")
def videos() -> dict[str, bytes]:
    return {kind: video_bytes(kind, frames=FRAMES, fps=FPS) for kind in VIDEO_FORMATS}


def _levels(clip: torch.Tensor) -> list[int]:
    """The frame numbers of a clip, from each frame's grey level."""
    levels = [frame_level(i) for i in range(FRAMES)]
    return [int(np.argmin([abs(float(f.float().mean()) - v) for v in levels])) for f in clip]


def _close(stamps, expected) -> bool:
    return np.allclose(
        np.array(stamps, dtype=float).reshape(-1, 2), np.array(expected, dtype=float).reshape(-1, 2)
    )


def _decoder(data: bytes) -> AVDecoder:
    return AVDecoder(io.BytesIO(data), suppress_warnings=True)


@pytest.mark.parametrize("kind", sorted(VIDEO_FORMATS))
def test_frames_by_number(videos, kind):
    clips, stamps = _decoder(videos[kind]).get_video_clips(
        [(0, 0), (3, 5), (2, 2), (10, 30), (12, 13)], "frames"
    )
    # a range past the last frame gives no clip; the others their frames, even when going backwards
    assert [_levels(c) for c in clips] == [[0], [3, 4, 5], [2], [10, 11]]
    assert all(c.dtype == torch.uint8 and c.shape[1:] == (3, 32, 48) for c in clips)
    assert _close(stamps, [(0.0, 0.1), (0.3, 0.6), (0.2, 0.3), (1.0, 1.2)])


@pytest.mark.parametrize("kind", sorted(VIDEO_FORMATS))
def test_frames_by_time(videos, kind):
    clips, stamps = _decoder(videos[kind]).get_video_clips([(0.0, 0.0), (0.45, 0.65), (1.05, float("inf"))])
    assert [_levels(c) for c in clips] == [[0], [4, 5, 6], [10, 11]]
    assert _close(stamps, [(0.0, 0.1), (0.4, 0.7), (1.0, 1.2)])


def test_whole_video_resized_and_warning(videos):
    dec = AVDecoder(io.BytesIO(videos["mp4"]))
    with pytest.warns(RuntimeWarning, match="frame numbers"):  # mp4 is read by frame number
        data = dec.get_clips(video_clip_ranges=[(0, float("inf"))], video_out_frame_size=(20, 16))
    assert isinstance(data, AVData) and data.audio_clips == [] and data.audio_timestamps == []
    (clip,) = data.video_clips
    assert clip.shape == (FRAMES, 3, 16, 20) and _levels(clip) == list(range(FRAMES))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        full = _decoder(videos["mkv"]).get_video()  # read by timestamp: no conversion, no warning
    assert _levels(full.video_clips[0]) == list(range(FRAMES)) and full.video_timestamps == [(0.0, 1.2)]


@pytest.mark.parametrize("kind", ["wav", "flac"])
def test_audio_samples_exact(kind):
    dec = _decoder(audio_bytes(kind, seconds=0.5, sample_rate=8000, channels=2))
    expected = tone(8000, 4000, 2)
    (whole,), stamps = dec.get_audio_clips([(0, float("inf"))])
    assert whole.dtype == torch.int16 and np.array_equal(whole.numpy(), expected) and stamps == [(0.0, 0.5)]
    clips, stamps = dec.get_audio_clips([(0.1, 0.2), (0.3015, 0.42), (0.45, 1.0), (0.6, 0.7)])
    assert [c.shape[1] for c in clips] == [800, 948, 400]  # the range past the end gives no clip
    assert np.array_equal(clips[0].numpy(), expected[:, 800:1600])
    assert np.array_equal(clips[1].numpy(), expected[:, 2412:3360])
    assert np.array_equal(clips[2].numpy(), expected[:, 3600:])
    assert _close(stamps, [(0.1, 0.2), (0.3015, 0.42), (0.45, 0.5)])
    (by_samples,), _ = dec.get_audio_clips([(100, 110)], audio_unit="samples")
    assert np.array_equal(by_samples.numpy(), expected[:, 100:110])
    assert dec.get_audio().audio_clips[0].shape == (2, 4000)


def test_video_with_audio_track():
    dec = _decoder(video_bytes("mkv", frames=FRAMES, fps=FPS, audio_rate=8000))
    data = dec.get_video_with_audio()
    assert _levels(data.video_clips[0]) == list(range(FRAMES))
    assert np.array_equal(data.audio_clips[0].numpy(), tone(8000, 9600, 1))  # flac in mkv: lossless
    data = dec.get_clips(video_clip_ranges=[(0.5, 0.5)], audio_clip_ranges=[(0.5, 0.55)])
    assert _levels(data.video_clips[0]) == [5] and data.audio_clips[0].shape == (1, 400)
    assert dec.has_audio_stream() and dec.has_video_stream()
    assert dec.get_frames(video_decode_audio=True).audio_clips[0].shape == (1, 9600)
    assert dec.get_frames().audio_clips == []


def test_metadata(videos):
    md = _decoder(video_bytes("mkv", frames=FRAMES, fps=FPS, audio_rate=8000)).get_metadata(
        get_audio_num_samples=True
    )
    assert isinstance(md, AVMetadata)
    assert (md.video_num_frames, md.video_fps, md.video_width, md.video_height) == (FRAMES, 10.0, 48, 32)
    assert md.video_duration == pytest.approx(1.2) and md.audio_duration == pytest.approx(1.2)
    assert (md.audio_channels, md.audio_sample_rate, md.audio_num_samples) == (1, 8000, 9600)
    assert AVMetadata.from_dict(md.to_dict()) == md
    dec = _decoder(videos["mp4"])
    light = dec.get_metadata(get_video_frame_size=False, get_video_frame_count=False)
    assert light.video_width is None and light.audio_sample_rate is None and light.video_fps == 10.0
    assert dec.get_video_duration(get_frame_count=True) == (pytest.approx(1.2), FRAMES)
    assert dec.get_video_fps() == 10.0 and dec.get_audio_duration() is None
    wav = _decoder(audio_bytes("wav", seconds=0.5, sample_rate=8000))
    assert wav.get_audio_samples_per_second() == 8000 and wav.get_audio_duration() == 0.5
    assert not wav.has_video_stream() and wav.get_metadata().video_fps is None


def test_uniform_helpers(videos):
    dec = _decoder(videos["mkv"])
    frames, starts = get_single_frames_uniform(dec, 4, video_out_frame_size=(24, 16), return_timestamps=True)
    # centred on frames 0 .. 11: starts at 0.05, 0.4167, 0.7833, 1.15 s
    assert frames.shape == (4, 3, 16, 24) and _levels(frames) == [0, 4, 7, 11]
    assert starts == pytest.approx([0.0, 0.4, 0.7, 1.1])
    # clips start at 0, 0.45 and 0.9 s; 0.9 s / (1/1000) s = 899.99.. truncates to 899, inside frame 8 (as energon)
    clips = get_clips_uniform(dec, clip_duration_seconds=0.3, num_clips=3, request_video=True)
    assert [_levels(c) for c in clips.video_clips] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    wav = _decoder(audio_bytes("wav", seconds=0.5, sample_rate=8000))
    audio = get_clips_uniform(wav, clip_duration_seconds=0.1, num_clips=5, request_audio=True)
    assert [c.shape[1] for c in audio.audio_clips] == [800] * 5 and audio.video_clips == []
    assert _close(audio.audio_timestamps, [(0.1 * i, 0.1 * i + 0.1) for i in range(5)])
    with pytest.raises(ValueError, match="request video, audio or both"):
        get_clips_uniform(wav, 0.1, 2)


def test_pickled_decoder_decodes(videos):
    dec = pickle.loads(pickle.dumps(_decoder(videos["webm"])))
    assert _levels(get_single_frames_uniform(dec, 3)) == [0, 6, 11]


def test_errors(videos):
    wav = _decoder(audio_bytes("wav", seconds=0.2))
    with pytest.raises(ValueError, match="no video stream"):
        wav.get_video_clips([(0, 1)])
    with pytest.raises(ValueError, match="no audio stream"):
        _decoder(videos["mp4"]).get_audio_clips([(0, 1)])
    with pytest.raises(ValueError, match="audio_unit"):
        wav.get_audio_clips([(0, 1)], audio_unit="frames")
    with pytest.raises(ValueError, match="end is before the start"):
        wav.get_audio_clips([(0.2, 0.1)])
    with pytest.raises(ValueError, match="text mode"):
        AVDecoder(io.StringIO("x"))
    assert _decoder(b"not media at all").get_frames() is None


def test_wav_matches_soundfile(tmp_path):
    """An independent WAV reader (libsndfile) gives the same samples, whole and cut at 0.25 .. 0.5 s."""
    soundfile = pytest.importorskip("soundfile")
    path = tmp_path / "tone.wav"
    path.write_bytes(audio_bytes("wav", seconds=0.75, sample_rate=16000, channels=2))
    reference, rate = soundfile.read(str(path), dtype="int16")
    with open(path, "rb") as f:  # a file object works as the stream, as in energon
        (whole, part), _ = AVDecoder(f).get_audio_clips([(0, float("inf")), (0.25, 0.5)])
    assert rate == 16000 and np.array_equal(whole.numpy(), reference.T)
    assert np.array_equal(part.numpy(), reference[4000:8000].T)
