"""Image batches decoded straight into recycled shared-memory slots: identical to energon 7.4.1 per key for its
image modes (float CHW default, uint8, padded variable sizes), slot lifetime with held batches, target sizes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import energon_arrow as ea
from energon_arrow.images.device import normalize_on_device
from energon_arrow.testing.images import write_image_webdataset
from tests.reference import energon_prepare

energon = pytest.importorskip("megatron.energon")


@pytest.fixture(scope="module")
def fixed_root(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("img-fixed") / "ds")
    write_image_webdataset(root, shards=3, samples_per_shard=16, size=(40, 56))
    energon_prepare(root, split_ratio="1,0,0")
    return root


@pytest.fixture(scope="module")
def varied_root(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("img-varied") / "ds")
    write_image_webdataset(root, shards=2, samples_per_shard=12, size=(24, 72), varied=True, seed=3)
    energon_prepare(root, split_ratio="1,0,0")
    return root


def _batches(mod, root, workers=0, count=None, te=None, batch_size=8, **decoder):
    if te is None:

        class TE(mod.DefaultTaskEncoder):
            pass

        te = TE()
    if decoder:
        te.decoder = mod.SampleDecoder(**decoder)
    wc = mod.WorkerConfig(rank=0, world_size=1, num_workers=workers)
    ds = mod.get_val_dataset(
        root, worker_config=wc, batch_size=batch_size, task_encoder=te, split_part="train"
    )
    out = []
    for b in mod.get_loader(ds):
        out.append(b)
        if count is not None and len(out) == count:
            break
    return out


def _assert_same(ours, ref):
    assert [b.__key__ for b in ours] == [b.__key__ for b in ref]
    for a, r in zip(ours, ref):
        assert a.image.dtype == r.image.dtype and a.image.shape == r.image.shape
        assert torch.equal(a.image, r.image)
        assert a.caption == r.caption


@pytest.mark.parametrize("workers", [0, 2])
def test_float_default_identical_to_energon(fixed_root, workers):
    ref = _batches(energon, fixed_root, workers)  # validation batches depend on the workers, as in energon
    ours = _batches(ea, fixed_root, workers)
    _assert_same(ours, ref)
    assert ours[0].image.dtype == torch.float32 and ours[0].image.shape == (8, 3, 40, 56)


def test_variable_sizes_padded_like_energon(varied_root):
    """energon pads images of different sizes with zeros to the largest height/width (batch_pad_stack)."""
    ref = _batches(energon, varied_root, workers=2)
    ours = _batches(ea, varied_root, workers=2)
    _assert_same(ours, ref)
    assert len({tuple(b.image.shape) for b in ours}) > 1


@pytest.mark.parametrize("mode", ["torchrgb8", "torchl", "torchl8", "torchrgba"])
def test_other_torch_modes_identical_to_energon(varied_root, mode):
    _assert_same(
        _batches(ea, varied_root, 2, image_decode=mode), _batches(energon, varied_root, 2, image_decode=mode)
    )


def test_uint8_layouts_and_cpu_normalisation(fixed_root):
    chw = _batches(ea, fixed_root, 2, count=2, image_decode="torchrgb8")
    hwc = _batches(ea, fixed_root, 2, count=2, image_decode="torchrgb8", image_layout="HWC")
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    norm = _batches(ea, fixed_root, 2, count=2, image_decode="torchrgb8", image_normalize=(mean, std))
    for c, h, n in zip(chw, hwc, norm):
        assert c.image.dtype == torch.uint8 and h.image.shape == (8, 40, 56, 3)
        assert torch.equal(h.image, c.image.permute(0, 2, 3, 1))
        # no CUDA here: the workers normalise on the CPU, fused into the decode
        expected = (c.image.float() / 255 - torch.tensor(mean)[:, None, None]) / torch.tensor(std)[
            :, None, None
        ]
        assert n.image.dtype == torch.float32 and torch.allclose(n.image, expected, atol=1e-5)


def test_normalize_on_device_function():
    """The main-process normalisation of uint8 batches after the copy to the GPU (run here on CPU tensors)."""
    from energon_arrow.images.decode_into import image_options

    def batch(image):
        return ea.CaptioningSample(__key__=["a", "b"], __restore_key__=(), image=image, caption=["", ""])

    x = torch.randint(0, 256, (2, 3, 4, 5), dtype=torch.uint8)
    opts = image_options(normalize=((0.5, 0.4, 0.3), (0.2, 0.3, 0.4)))
    (out,) = normalize_on_device([batch(x)], ["image"], opts.affine(3), "CHW")
    mean, std = torch.tensor((0.5, 0.4, 0.3))[:, None, None], torch.tensor((0.2, 0.3, 0.4))[:, None, None]
    assert torch.allclose(out.image, (x.float() / 255 - mean) / std, atol=1e-5)
    hwc = batch(x.permute(0, 2, 3, 1).contiguous())
    (out,) = normalize_on_device([hwc], ["image"], opts.affine(3), "HWC")
    assert torch.allclose(out.image, ((x.float() / 255 - mean) / std).permute(0, 2, 3, 1), atol=1e-5)


@pytest.mark.parametrize("workers", [0, 2])
def test_slots_recycled_and_held_batches_kept(fixed_root, workers):
    """Slots are reused once the user dropped a batch; a batch (or a view of it) the user keeps is never
    overwritten: its slot is replaced by fresh memory instead."""
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=workers)
    ds = ea.get_train_dataset(fixed_root, worker_config=wc, batch_size=4, shuffle_buffer_size=None)
    seen = set()
    for i, b in enumerate(ea.get_loader(ds)):  # nothing held: each worker cycles through its slots
        seen.add(b.image.untyped_storage().data_ptr())
        if i == 30:
            break
    assert len(seen) == (workers * (2 + 3) if workers else 3)  # workers x (prefetch_factor + 3)
    held, copies, storages = [], [], set()
    for i, b in enumerate(ea.get_loader(ds)):
        storages.add(b.image.untyped_storage().data_ptr())
        if i % 5 == 0:
            keep = b.image if i % 10 == 0 else b.image[1:3]  # the whole batch tensor, or a view of it
            held.append(keep)
            copies.append(keep.clone())
        if i == 60:
            break
    assert len(storages) < 40  # recycled, not one allocation per batch
    for keep, copy in zip(held, copies):
        assert torch.equal(keep, copy)


def test_dataset_iterated_without_loader(fixed_root):
    """Outside a Loader there is no slot board: plain batch tensors, still decoded in place."""
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = ea.get_val_dataset(fixed_root, worker_config=wc, batch_size=8, split_part="train")
    ref = _batches(energon, fixed_root, count=1)[0]
    _, _, batch, leases, _ = next(iter(ds))
    assert leases == () and torch.equal(batch.image, ref.image)


class PerSample(ea.DefaultTaskEncoder):
    @ea.stateless
    def encode_sample(self, sample):  # forces the per-sample path
        return sample


@pytest.mark.parametrize("crop", ["center", "random"])
def test_target_size_deterministic(varied_root, crop):
    opts = dict(image_decode="torchrgb8", image_size=(16, 20), image_crop=crop)
    a = _batches(ea, varied_root, 2, **opts)
    b = _batches(ea, varied_root, 2, **opts)
    per_sample = _batches(ea, varied_root, 2, te=PerSample(), **opts)
    for x, y, z in zip(a, b, per_sample):
        assert x.image.shape[1:] == (3, 16, 20)
        assert torch.equal(x.image, y.image) and torch.equal(x.image, z.image)
    # (validation batches depend on the worker count, as energon's do; a sample's crop seed is its batch position)


def test_random_crop_varies_with_the_seed_position(fixed_root):
    """Random crops are drawn per sample from its position seed: the same image gets other crops in other
    positions (e.g. epochs), and the same crop again in the same position."""
    from energon_arrow.images.resize import crop_box

    boxes = {crop_box(56, 40, (16, 16), "random", seed) for seed in range(20)}
    assert len(boxes) > 10
    assert crop_box(56, 40, (16, 16), "random", 7) == crop_box(56, 40, (16, 16), "random", 7)
    left, top, right, bottom = crop_box(56, 40, (16, 16), "center", 0)
    assert (right - left, bottom - top) == (40, 40) and (left, top) == (8, 0)


def test_target_size_center_crop_values(fixed_root):
    """A center crop to the image's own aspect is a bilinear resize of the decoded image (torch's antialiased
    filter: Pillow's within 2 levels); from half the size down the JPEG is decoded at a reduced scale (Pillow
    draft), which changes pixels slightly. (The exact semantics: tests/images/test_image_resize.py.)"""
    from PIL import Image

    (raw,) = _batches(ea, fixed_root, 0, count=1, image_decode="pil")
    for size, tolerance in (((30, 42), 2), ((20, 28), 8)):
        (ours,) = _batches(ea, fixed_root, 0, count=1, image_decode="rgb8", image_size=size)
        resized = raw.image[0].resize(size[::-1], Image.Resampling.BILINEAR, box=(0, 0, 56, 40))
        diff = np.abs(ours.image[0].astype(np.int16) - np.asarray(resized).astype(np.int16))
        assert ours.image[0].shape == (*size, 3) and diff.max() <= tolerance


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(image_size=0), "image_size"),
        (dict(image_size=(3, 4, 5)), "image_size"),
        (dict(image_crop="corner"), "image_crop"),
        (dict(image_layout="WHC"), "image_layout"),
        (dict(image_decode="rgb8", image_layout="HWC"), "image_layout"),
        (dict(image_decode="pil", image_normalize=((0.5,), (0.5,))), "image_normalize"),
        (dict(image_normalize=((0.5, 0.5), (0.5, 0.5))), "image_normalize"),
        (dict(image_normalize=((0.5,), (0.0,))), "image_normalize"),
    ],
)
def test_image_option_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ea.SampleDecoder(**kwargs)
