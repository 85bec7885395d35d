"""Video / audio decoding against energon 7.4.1 on the same generated media: metadata, clips by frame number and
by time (timestamps equal to the last bit), resized frames, the uniform helpers, audio clips, SampleDecoder's
`av_decode` modes, and a prepared video dataset loaded by both loaders. The ranges here are ones energon handles;
the cases where we deliberately differ are listed in docs/migration.md (AV decoding) and tested in
tests/samples/test_av_positions.py."""

from __future__ import annotations

import dataclasses
import io
import warnings

import pytest
import torch

pytestmark = pytest.mark.conformance
pytest.importorskip("av")
pytest.importorskip("filetype")
energon = pytest.importorskip("megatron.energon")

from megatron.energon import av as ref_av  # noqa: E402

import energon_arrow as ea  # noqa: E402
from energon_arrow import av as ours_av  # noqa: E402
from energon_arrow.testing.media import audio_bytes, video_bytes  # noqa: E402
from energon_arrow.testing.synthetic import tar_of_samples  # noqa: E402
from tests.reference import energon_prepare  # noqa: E402

INF = float("inf")
# (media kind, audio sample rate of the video's audio track or None)
VIDEOS = [("mp4", 16000), ("mov", None), ("mkv", 16000), ("webm", 48000), ("avi", None)]


def _same(a, b) -> bool:
    """Equal values, types aside (energon's classes vs ours): tensors by dtype, shape and content."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if dataclasses.is_dataclass(a):
        names = [f.name for f in dataclasses.fields(a)]
        return names == [f.name for f in dataclasses.fields(b)] and all(
            _same(getattr(a, n), getattr(b, n)) for n in names
        )
    return type(a) is type(b) and a == b


def _both(data: bytes):
    return ref_av.AVDecoder(io.BytesIO(data)), ours_av.AVDecoder(io.BytesIO(data))


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # both warn about unit conversions
        yield


@pytest.mark.parametrize(("kind", "rate"), VIDEOS, ids=[k for k, _ in VIDEOS])
def test_video_decoding_equals_energon(kind, rate):
    ref, ours = _both(video_bytes(kind, frames=12, fps=10, audio_rate=rate))
    for flags in (
        {"get_audio_num_samples": True},
        {"get_video_frame_count": False, "get_video_frame_size": False},
    ):
        assert _same(ref.get_metadata(**flags), ours.get_metadata(**flags)), flags
    assert ref.get_video_duration(True) == ours.get_video_duration(True)
    assert ref.get_video_fps() == ours.get_video_fps()
    frames = [(0, 0), (3, 5), (2, 2), (2, 2), (1, 3), (6, 6), (10, 20), (20, 30)]
    assert _same(ref.get_video_clips(frames, "frames"), ours.get_video_clips(frames, "frames"))
    seconds = [
        (0, 0),
        (0.3, 0.5),
        (0.25, 0.25),
        (0.05, 0.15),
        (0.75, 0.81),
        (1 / 30, 1 / 30 + 0.05),
        (1.05, 2),
    ]
    assert _same(ref.get_video_clips(seconds), ours.get_video_clips(seconds))
    assert _same(
        ref.get_video_clips(seconds, "seconds", (20, 16)), ours.get_video_clips(seconds, "seconds", (20, 16))
    )
    assert _same(ref.get_video(), ours.get_video())
    assert _same(
        ref_av.get_single_frames_uniform(ref, 5, video_out_frame_size=(24, 24), return_timestamps=True),
        ours_av.get_single_frames_uniform(ours, 5, video_out_frame_size=(24, 24), return_timestamps=True),
    )
    assert _same(
        ref_av.get_clips_uniform(ref, 0.25, 3, request_video=True, request_audio=rate is not None),
        ours_av.get_clips_uniform(ours, 0.25, 3, request_video=True, request_audio=rate is not None),
    )
    if rate is not None:
        audio = [(0, 0.1), (0.25, 0.5), (0.05, 0.3), (0.123, 0.456), (1.1, 2), (0, INF)]
        assert _same(ref.get_audio_clips(audio), ours.get_audio_clips(audio))
        assert _same(ref.get_video_with_audio(), ours.get_video_with_audio())


@pytest.mark.parametrize("kind", ["wav", "flac", "mp3"])
def test_audio_decoding_equals_energon(kind):
    ref, ours = _both(audio_bytes(kind, seconds=0.7, sample_rate=16000, channels=2))
    assert _same(ref.get_metadata(get_audio_num_samples=True), ours.get_metadata(get_audio_num_samples=True))
    assert ref.get_audio_duration() == ours.get_audio_duration()
    ranges = [
        (0, 0.1),
        (0.25, 0.5),
        (0.3, 0.61),
        (0.05, 0.3),
        (0.123, 0.456),
        (0.6, 0.7),
        (1.0, 2.0),
        (0, INF),
    ]
    assert _same(ref.get_audio_clips(ranges), ours.get_audio_clips(ranges))
    by_samples = [(0, 4000), (1500, 3600), (0, INF)]
    assert _same(ref.get_audio_clips(by_samples, "samples"), ours.get_audio_clips(by_samples, "samples"))
    assert _same(
        ref_av.get_clips_uniform(ref, 0.2, 4, request_audio=True),
        ours_av.get_clips_uniform(ours, 0.2, 4, request_audio=True),
    )
    assert _same(ref.get_frames(), ours.get_frames())


@pytest.mark.parametrize("mode", ["torch", "AVDecoder"])
@pytest.mark.parametrize("decode_audio", [False, True])
def test_sample_decoder_modes_equal_energon(mode, decode_audio):
    ref = energon.SampleDecoder(av_decode=mode, video_decode_audio=decode_audio)
    ours = ea.SampleDecoder(av_decode=mode, video_decode_audio=decode_audio)
    assert ref.config() == ours.config()
    parts = {
        "clip.mp4": video_bytes("mp4", frames=4, audio_rate=16000),
        "k.MKV": video_bytes("mkv", frames=4, audio_rate=16000),
        "k.wav": audio_bytes("wav", seconds=0.1),
        "k.flac": audio_bytes("flac", seconds=0.1),
        "k.flv": b"not decoded whole by energon",
    }
    for name, data in parts.items():
        a, b = ref.decode(name, data), ours.decode(name, data)
        if mode == "AVDecoder":
            assert type(a).__name__ == type(b).__name__ == "AVDecoder"
            a, b = a.get_frames(decode_audio), b.get_frames(decode_audio)
        assert _same(a, b), name


def test_pyav_mode_gives_containers_like_energon():
    data = video_bytes("mp4", frames=3)
    ref = energon.SampleDecoder(av_decode="pyav").decode("k.mp4", data)
    ours = ea.SampleDecoder(av_decode="pyav").decode("k.mp4", data)
    assert type(ref) is type(ours)
    with ref, ours:
        assert [f.pts for f in ref.decode(video=0)] == [f.pts for f in ours.decode(video=0)]


@pytest.fixture(scope="module")
def video_root(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("av-conf") / "ds"
    (root / "shards").mkdir(parents=True)
    samples = [
        (f"v{i:03d}", {"mp4": video_bytes("mp4", frames=2 + i, size=(16, 16)), "txt": f"q{i}".encode()})
        for i in range(6)
    ]
    (root / "shards" / "shard-000000.tar").write_bytes(tar_of_samples(samples))
    energon_prepare(str(root), "1,0,0", "VidQASample", '{"video": "mp4", "context": "txt"}')
    return str(root)


def _decoded_by_key(mod, root) -> dict:
    class TE(mod.DefaultTaskEncoder):
        decoder = mod.SampleDecoder(av_decode="torch")

    wc = mod.WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = mod.get_val_dataset(root, split_part="train", worker_config=wc, batch_size=None, task_encoder=TE())
    return {s.__key__: s.video for s in mod.get_loader(ds)}


def test_loaded_video_dataset_equals_energon(video_root):
    ref, ours = _decoded_by_key(energon, video_root), _decoded_by_key(ea, video_root)
    assert sorted(ref) == sorted(ours) and len(ours) == 6
    for key in ref:
        assert _same(ref[key], ours[key]), key


def test_public_names_match_energon():
    assert set(ref_av.__all__) <= set(ours_av.__all__)
    for cls in ("AVDecoder", "AVWebdatasetDecoder"):
        ref_methods = {n for n in dir(getattr(ref_av, cls)) if not n.startswith("_")}
        assert ref_methods <= set(dir(getattr(ours_av, cls))), cls
    from megatron.energon.media import AVMetadata

    assert [f.name for f in dataclasses.fields(AVMetadata)] == [
        f.name for f in dataclasses.fields(ours_av.AVMetadata)
    ]
    assert ea.av is ours_av
