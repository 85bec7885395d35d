"""Video and audio parts through the loader: a tar dataset of generated mp4 + wav + txt samples, prepared, loaded
with get_train_dataset / get_loader; parts decoded in the loader's worker by the task encoder's SampleDecoder
(`av_decode` "AVDecoder", "torch", "pyav")."""

from __future__ import annotations

import io

import pytest
import torch

pytest.importorskip("av")
pytest.importorskip("filetype")

import energon_arrow as ea  # noqa: E402
from energon_arrow.av import AVData, AVDecoder  # noqa: E402
from energon_arrow.testing.media import audio_bytes, tone, video_bytes  # noqa: E402
from energon_arrow.testing.synthetic import tar_of_samples  # noqa: E402
from tests.loader.conftest import first_batch  # noqa: E402

SAMPLES = 4


def _frames(i: int) -> int:
    return 3 + i  # sample i's video has 3 + i frames, its audio 100 x (i + 1) samples


@pytest.fixture(scope="module")
def av_root(tmp_path_factory) -> str:
    from energon_arrow.index.prepare import PrepareOptions, prepare_dataset
    from energon_arrow.meta import field_map_dataset, parse_split_ratio

    root = tmp_path_factory.mktemp("av") / "ds"
    (root / "shards").mkdir(parents=True)
    samples = [
        (
            f"s{i:03d}",
            {
                "mp4": video_bytes("mp4", frames=_frames(i), fps=10, size=(16, 16)),
                "wav": audio_bytes("wav", seconds=(i + 1) / 80, sample_rate=8000),
                "txt": f"what happens in clip {i}?".encode(),
            },
        )
        for i in range(SAMPLES)
    ]
    (root / "shards" / "shard-000000.tar").write_bytes(tar_of_samples(samples))
    options = PrepareOptions(
        split_ratio=parse_split_ratio("1,0,0"),
        dataset_yaml=field_map_dataset("VidQASample", {"video": "mp4", "context": "txt"}),
        num_workers=1,
    )
    prepare_dataset(str(root), options)
    return str(root)


def _index(key: str) -> int:
    return int(key.rsplit("s", 1)[-1][:3])


def test_vidqa_samples_carry_av_decoders(av_root):
    batch = first_batch(av_root, workers=1, shuffle_buffer_size=None, max_samples_per_sequence=None)
    assert type(batch).__name__ == "VidQASample" and len(batch.video) == 4
    for key, video, context in zip(batch.__key__, batch.video, batch.context):
        i = _index(key)
        assert isinstance(video, AVDecoder) and context == f"what happens in clip {i}?"
        frames, _ = video.get_video_clips([(0, float("inf"))], video_unit="frames")
        assert frames[0].shape == (_frames(i), 3, 16, 16) and frames[0].dtype == torch.uint8


class TorchDecoding(ea.DefaultTaskEncoder):
    """Whole clips decoded to tensors in the worker (energon's av_decode="torch")."""

    decoder = ea.SampleDecoder(av_decode="torch")

    @ea.stateless
    def encode_sample(self, sample):
        assert isinstance(sample.video, AVData)
        return sample


def test_torch_mode_decodes_in_the_worker(av_root):
    batch = first_batch(
        av_root, TorchDecoding(), workers=1, shuffle_buffer_size=None, max_samples_per_sequence=None
    )
    # energon's default batching recurses into the AVData dataclass: one AVData of per-sample lists
    data = batch.video
    assert isinstance(data, AVData) and data.audio_clips == [[]] * 4
    for key, clips, stamps in zip(batch.__key__, data.video_clips, data.video_timestamps):
        assert clips[0].shape == (_frames(_index(key)), 3, 16, 16)
        assert stamps[0][1] == pytest.approx(_frames(_index(key)) / 10)


def cook_audio(sample):
    """A crude sample's wav part (decoded by the pyav-mode decoder) read with PyAV in the worker."""
    container = sample["wav"]
    samples = torch.cat([torch.from_numpy(f.to_ndarray()) for f in container.decode(audio=0)], dim=1)
    container.close()
    return ea.TextSample(
        __key__=sample["__key__"], __restore_key__=sample["__restore_key__"], text=str(samples.shape[1])
    )


class PyAVCrude(ea.DefaultTaskEncoder):
    decoder = ea.SampleDecoder(av_decode="pyav")
    cookers = [ea.Cooker(cook_audio)]


def test_pyav_containers_and_crude_samples(av_root, tmp_path):
    import shutil

    root = str(tmp_path / "crude")
    shutil.copytree(av_root, root)
    with open(f"{root}/.nv-meta/dataset.yaml", "w") as f:
        f.write("__module__: megatron.energon\n__class__: CrudeWebdataset\n")
    batch = first_batch(root, PyAVCrude(), workers=1, shuffle_buffer_size=None, max_samples_per_sequence=None)
    assert [int(t) for t in batch.text] == [100 * (_index(k) + 1) for k in batch.__key__]


def test_audio_part_decodes_to_its_samples(av_root):
    from energon_arrow.samples import SampleDecoder

    wav = audio_bytes("wav", seconds=0.05, sample_rate=8000)
    data = SampleDecoder(av_decode="torch").decode("k.wav", wav)
    assert torch.equal(data.audio_clips[0], torch.from_numpy(tone(8000, 400, 1)))
    assert isinstance(SampleDecoder().decode("seg.MP4", video_bytes("mp4", frames=2)), AVDecoder)
    # energon's torch mode leaves types it does not decode whole (e.g. flv, or undetected payloads) as bytes
    assert SampleDecoder(av_decode="torch").decode("k.flv", b"not a video") == b"not a video"
    guessed = SampleDecoder(guess_content=True).decode("k.bin", wav)
    assert isinstance(guessed, AVDecoder) and guessed.get_audio_samples_per_second() == 8000
    stream = io.BytesIO(wav)
    assert AVDecoder(stream).get_audio().audio_clips[0].shape == (1, 400)


def test_deprecated_loader_arguments_select_the_av_mode(av_root):
    with pytest.warns(DeprecationWarning):
        batch = first_batch(
            av_root,
            av_decode="torch",
            video_decode_audio=True,
            shuffle_buffer_size=None,
            max_samples_per_sequence=None,
        )
    assert isinstance(batch.video, AVData) and len(batch.video.video_clips) == 4
