"""`image_device_decode=True`: the workers ship compressed image bytes, the training process decodes them in batches
on the loader's device (torchvision's decode_jpeg; nvjpeg on CUDA), with a per-image Pillow fallback.

This machine's torch is a CPU build, with which torchvision's native image ops cannot load; the path is exercised
with `PillowDecodeJpeg`, a stand-in with decode_jpeg's contract, and with the real torchvision where it loads.
"""

from __future__ import annotations

import io
import sys

import numpy as np
import pytest
import torch
from PIL import Image

import energon_arrow as ea
from energon_arrow.images import jpeg_bytes
from energon_arrow.images.jpeg_bytes import CompressedImages, jpeg_components
from energon_arrow.loader.errors import DecodeError, LoaderError
from energon_arrow.loader.loader import Loader
from energon_arrow.testing.images import jpeg_bytes as make_jpeg
from energon_arrow.testing.images import write_image_webdataset
from energon_arrow.testing.synthetic import tar_of_samples, write_shards
from tests.loader.conftest import prepare


class PillowDecodeJpeg:
    """torchvision.io.decode_jpeg's contract, decoded with Pillow (libjpeg-turbo): a list of 1-D uint8 CPU tensors
    in, (C, H, W) uint8 tensors on `device` out; any input that is not a decodable JPEG fails the whole call.
    `calls` records the batch size of each call."""

    def __init__(self):
        self.calls: list[int] = []

    def __call__(self, inputs, mode="UNCHANGED", device="cpu"):
        self.calls.append(len(inputs))
        out = []
        for t in inputs:
            assert t.device.type == "cpu" and t.dtype == torch.uint8 and t.dim() == 1
            img = Image.open(io.BytesIO(t.numpy().tobytes()))
            if img.format != "JPEG":
                raise RuntimeError("Not a JPEG file")
            if mode == "GRAY":
                img.draft("L", img.size)  # libjpeg's grey output (the Y channel), as torchvision's GRAY
            img.load()
            arr = np.asarray(img.convert("L" if mode == "GRAY" else "RGB"))
            out.append(torch.from_numpy(arr.reshape(*arr.shape[:2], -1).transpose(2, 0, 1).copy()).to(device))
        return out


@pytest.fixture
def standin(monkeypatch) -> PillowDecodeJpeg:
    fn = PillowDecodeJpeg()
    monkeypatch.setattr(jpeg_bytes, "batched_jpeg_decoder", lambda: fn)
    return fn


@pytest.fixture(scope="module")
def varied_root(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("gpu-varied") / "ds")
    write_image_webdataset(root, shards=2, samples_per_shard=12, size=(24, 72), varied=True, seed=5)
    prepare(root, split_ratio="1,0,0")
    return root


def _png(rng) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (20, 30, 3), dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def _progressive(rng) -> bytes:
    buf = io.BytesIO()
    Image.open(io.BytesIO(make_jpeg(rng, 28, 36))).save(buf, "JPEG", progressive=True, quality=85)
    return buf.getvalue()


def _odd_payloads(rng) -> dict[str, bytes]:
    return {
        "rgb": make_jpeg(rng, 32, 40),
        "grey": make_jpeg(rng, 26, 30, mode="L"),
        "cmyk": make_jpeg(rng, 24, 24, mode="CMYK"),
        "png": _png(rng),
        "progressive": _progressive(rng),
        "corrupt": make_jpeg(rng, 40, 40)[:400],  # the header parses, the scan is cut
    }


@pytest.fixture(scope="module")
def mixed_root(tmp_path_factory) -> str:
    """Every kind of payload the fallback handles, in `jpg` parts, mixed into each batch."""
    root = str(tmp_path_factory.mktemp("gpu-mixed") / "ds")
    rng = np.random.default_rng(11)

    def shard(s: int) -> bytes:
        kinds = list(_odd_payloads(rng).items()) + [("rgb2", make_jpeg(rng, 32, 40))] * 2
        return tar_of_samples(
            (f"{s:02d}_{i:02d}_{kind}", {"jpg": data, "txt": kind.encode()})
            for i, (kind, data) in enumerate(kinds)
        )

    write_shards(root, 2, shard)
    prepare(root, split_ratio="1,0,0")
    return root


def _val(root, workers=2, batch_size=8, skip_errors=False, te=None, **decoder):
    if te is None:
        te = ea.DefaultTaskEncoder()
        te.decoder = ea.SampleDecoder(**decoder)
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=workers)
    return ea.get_val_dataset(
        root,
        worker_config=wc,
        batch_size=batch_size,
        task_encoder=te,
        split_part="train",
        skip_errors=skip_errors,
    )


def _assert_same(ours, ref):
    assert [b.__key__ for b in ours] == [b.__key__ for b in ref]
    for a, r in zip(ours, ref):
        assert a.image.dtype == r.image.dtype and a.image.shape == r.image.shape
        assert torch.equal(a.image, r.image), (a.image.float() - r.image.float()).abs().max()
        assert a.caption == r.caption


def test_jpeg_components():
    rng = np.random.default_rng(0)
    odd = _odd_payloads(rng)
    got = {kind: jpeg_components(data) for kind, data in odd.items()}
    assert got == {"rgb": 3, "grey": 1, "cmyk": 0, "png": 0, "progressive": 3, "corrupt": 3}
    assert jpeg_components(b"") == 0 and jpeg_components(odd["rgb"][:20]) == 0
    assert jpeg_components(memoryview(odd["grey"])) == 1


@pytest.mark.parametrize(
    "decoder",
    [
        dict(),  # energon's default: float CHW in [0, 1]
        dict(image_decode="torchrgb8"),
        dict(image_decode="torchl8"),
        dict(image_decode="torchrgba"),
        dict(image_decode="torchrgb8", image_layout="HWC"),
        dict(image_decode="torchrgb8", image_normalize=((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))),
    ],
)
def test_same_pixels_as_the_workers_decode(varied_root, standin, decoder):
    """Variable sizes (zero-padded batches) in every output kind: the same tensors as the workers' Pillow decode,
    each batch's JPEGs decoded in one batched call."""
    ref = list(ea.get_loader(_val(varied_root, **decoder)))
    ours = list(ea.get_loader(_val(varied_root, image_device_decode=True, **decoder)))
    _assert_same(ours, ref)
    assert len({tuple(b.image.shape) for b in ours}) > 1
    assert sum(standin.calls) == 24 and max(standin.calls) == 8


def test_workers_ship_compressed_bytes_only(varied_root, standin):
    """The batch a worker produces holds the payloads byte for byte in one buffer: nothing was decoded there."""
    raw = ea.DefaultTaskEncoder()
    raw.decoder = None
    payloads = [b.image for b in ea.get_loader(_val(varied_root, te=raw))]
    loader = Loader(_val(varied_root, image_device_decode=True), num_workers=2, device="cpu")
    shipped = list(loader._batches())  # as they come out of the DataLoader workers
    assert len(shipped) == len(payloads) == 4  # 2 workers x 12 samples: batches of 8 and 4 (energon's val)
    for batch, expected in zip(shipped, payloads):
        ci = batch.image
        assert isinstance(ci, CompressedImages) and ci.data.dtype == torch.uint8 and ci.data.dim() == 1
        assert ci.data.is_shared() and ci.part == "jpg"
        assert [ci.payload_bytes(i) for i in range(len(ci))] == expected
        assert ci.offsets[-1] == sum(map(len, expected)) and (ci.components == 3).all()
    assert standin.calls == []


def test_byte_buffers_live_in_recycled_slots(varied_root, standin):
    """The shipped buffers are batch slots: once decoded (and so dropped), a worker reuses them."""
    loader = Loader(_val(varied_root, batch_size=1, image_device_decode=True), num_workers=1, device="cpu")
    storages = set()
    for batch in loader._batches():
        storages.add(batch.image.untyped_storage().data_ptr())
        del batch
    assert len(storages) <= 2 + 3  # prefetch_factor + 3 slots for the one worker, 24 batches


def test_mixed_batch_falls_back_per_image(mixed_root, standin):
    """PNG, CMYK and corrupt payloads in a batch of JPEGs: the JPEGs are batched, the others decoded with Pillow;
    the corrupt one follows the error policy - skipped and counted, exactly like the workers' decode."""
    ref = list(ea.get_loader(_val(mixed_root, skip_errors=True, image_decode="torchrgb8")))
    loader = ea.get_loader(
        _val(mixed_root, skip_errors=True, image_decode="torchrgb8", image_device_decode=True)
    )
    ours = list(loader)
    _assert_same(ours, ref)
    assert (
        loader.skipped == 2
    )  # one corrupt sample per shard (the workers' count is the largest per worker: 1)
    assert all("corrupt" not in k for b in ours for k in b.__key__)
    # per batch: one call of its 6 JPEGs (RGB, grey, progressive, corrupt, 2 more; not the PNG or the CMYK one)
    # failed on the corrupt one, then each JPEG was decoded alone
    assert standin.calls == [6, 1, 1, 1, 1, 1, 1] * 2


def test_undecodable_image_names_shard_key_and_part(mixed_root, standin):
    with pytest.raises(DecodeError, match=r"shard-000000\.tar: sample '00_05_corrupt': part 'jpg'"):
        list(ea.get_loader(_val(mixed_root, image_device_decode=True)))


def test_determinism_and_resume(varied_root, standin):
    """Shuffled training batches: the same as the workers' decode, and a restored loader continues exactly."""

    def train(**decoder):
        te = ea.DefaultTaskEncoder()
        te.decoder = ea.SampleDecoder(image_decode="torchrgb8", **decoder)
        wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=2)
        ds = ea.get_train_dataset(
            varied_root,
            worker_config=wc,
            batch_size=4,
            shuffle_buffer_size=10,
            max_samples_per_sequence=3,
            task_encoder=te,
        )
        return ea.get_savable_loader(ds)

    def take(loader, n):
        out = []
        for b in loader:
            out.append(b)
            if len(out) == n:
                return out

    ref = take(train(), 8)
    loader = train(image_device_decode=True)
    first = take(loader, 3)
    state = loader.save_state_rank()
    again = take(train(image_device_decode=True), 8)
    restored = train(image_device_decode=True)
    restored.restore_state_rank(state)
    _assert_same(first + take(restored, 5), ref)
    _assert_same(again, ref)


def test_option_errors(varied_root, standin, monkeypatch):
    with pytest.raises(ValueError, match="image_device_decode.*'rgb8'"):
        ea.SampleDecoder(image_decode="rgb8", image_device_decode=True)
    with pytest.raises(ValueError, match="image_device_decode=True with image_size"):
        ea.SampleDecoder(image_size=32, image_device_decode=True)

    class PerSample(ea.DefaultTaskEncoder):
        def encode_sample(self, sample):
            return sample

    te = PerSample()
    te.decoder = ea.SampleDecoder(image_device_decode=True)
    with pytest.raises(LoaderError, match="image_device_decode=True needs torch-mode image fields"):
        list(ea.get_loader(_val(varied_root, te=te)))
    assert "image_device_decode" in repr(te.decoder)


def test_missing_torchvision_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchvision", None)
    monkeypatch.setitem(sys.modules, "torchvision.io", None)
    with pytest.raises(ImportError, match=r"energon-arrow\[gpu\]"):
        ea.SampleDecoder(image_device_decode=True)


def _torchvision_decoder():
    try:
        return jpeg_bytes.batched_jpeg_decoder()
    except ImportError as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize("mode", ["torchrgb8", "torchl8"])
def test_real_torchvision_matches_pillow(varied_root, mode):
    """With torchvision's own decoder (CPU here; CUDA when the loader targets a GPU): libjpeg-turbo on both sides,
    so the pixels agree with Pillow's within a level (nvjpeg differs by a few levels)."""
    _torchvision_decoder()
    ref = list(ea.get_loader(_val(varied_root, image_decode=mode)))
    ours = list(ea.get_loader(_val(varied_root, image_decode=mode, image_device_decode=True)))
    assert [b.__key__ for b in ours] == [b.__key__ for b in ref]
    for a, r in zip(ours, ref):
        assert a.image.shape == r.image.shape and a.image.dtype == r.image.dtype
        assert (a.image.int() - r.image.int()).abs().max() <= 1
    if torch.cuda.is_available():
        dev = list(Loader(_val(varied_root, image_decode=mode, image_device_decode=True), device="cuda"))
        for a, r in zip(dev, ref):
            assert a.image.is_cuda and (a.image.cpu().int() - r.image.int()).abs().float().mean() < 2


def test_a_failed_image_names_its_shard_and_sample(mixed_root, standin):
    """Without skip_errors the first image that neither decoder takes is a DecodeError naming its own shard and
    key (the samples' restore keys follow the loader's prefix in the batch's restore key)."""
    loader = ea.get_loader(_val(mixed_root, workers=0, image_decode="torchrgb8", image_device_decode=True))
    with pytest.raises(DecodeError) as info:
        list(loader)
    assert info.value.shard.startswith("shards/shard-") and info.value.shard.endswith(".tar")
    assert info.value.key.endswith("_corrupt") and info.value.part == "jpg"
