"""Target-size decoding (images/resize.py): the pixels are Pillow's crop + BILINEAR resize of the drafted
decode, box rounded to whole pixels (within 2 levels: torch's antialiased filter), close to a full decode resized
and center-cropped the way energon users do it, and the same pixels in every output form."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest

from energon_arrow.images.decode import IMAGE_SPECS, decode_image
from energon_arrow.images.decode_into import image_options
from energon_arrow.images.resize import crop_box, pixel_box, resized_pixels, write_resized
from energon_arrow.images.scratch import DecodeScratch
from energon_arrow.testing.images import jpeg_bytes

Image = pytest.importorskip("PIL.Image")
BILINEAR = Image.Resampling.BILINEAR


def _png(rng, h: int, w: int) -> bytes:
    buf = io.BytesIO()
    small = rng.integers(0, 256, (max(2, h // 8), max(2, w // 8), 3), dtype=np.uint8)
    Image.fromarray(small).resize((w, h), Image.Resampling.BICUBIC).save(buf, "PNG")
    return buf.getvalue()


def _reference(data: bytes, mode: str, target: tuple[int, int]) -> np.ndarray:
    """Written out independently: the center box at the covering scale, Pillow's draft for that scale, the box
    in the drafted image rounded to whole pixels, Pillow's crop + BILINEAR resize."""
    th, tw = target
    img = Image.open(io.BytesIO(data))
    w, h = img.size
    scale = max(th / h, tw / w)
    bw, bh = tw / scale, th / scale
    box = ((w - bw) / 2, (h - bh) / 2, (w + bw) / 2, (h + bh) / 2)
    drafted = img.draft(None, (math.ceil(w * scale), math.ceil(h * scale)))
    k = drafted[1][2] / w if drafted else 1.0
    img = img.convert(mode)
    box = [math.floor(v * k + 0.5) for v in box]
    return np.asarray(img.crop(tuple(box)).resize((tw, th), BILINEAR))


CASES = [  # (height, width, target, mode, format): drafts at 1/2, 1/4, 1/8, none, enlarging, other formats
    (96, 200, (32, 32), "RGB", "jpeg"),
    (300, 140, (40, 30), "RGB", "jpeg"),
    (500, 700, (48, 48), "RGB", "jpeg"),
    (130, 130, (64, 32), "RGB", "jpeg"),
    (20, 50, (32, 32), "RGB", "jpeg"),
    (90, 60, (24, 24), "L", "jpeg-gray"),
    (90, 60, (24, 24), "RGB", "jpeg-gray"),
    (90, 60, (24, 24), "L", "jpeg"),
    (70, 110, (24, 40), "RGBA", "png"),
]


def _payload(rng, h: int, w: int, fmt: str) -> bytes:
    if fmt == "png":
        return _png(rng, h, w)
    return jpeg_bytes(rng, h, w, mode="L" if fmt == "jpeg-gray" else "RGB")


@pytest.mark.parametrize("h, w, target, mode, fmt", CASES)
def test_pixels_are_pillow_crop_then_resize_of_the_drafted_decode(h, w, target, mode, fmt):
    rng = np.random.default_rng(h * w)
    data = _payload(rng, h, w, fmt)
    expected = _reference(data, mode, target)
    for scratch in (None, DecodeScratch()):
        ours = resized_pixels(data, mode, image_options(size=target), 0, scratch)
        ours = ours if ours.ndim == 2 else ours.transpose(1, 2, 0)
        assert ours.shape == expected.shape
        assert np.abs(ours.astype(np.int16) - expected).max() <= 2


def _resize_then_center_crop(data: bytes, target: int) -> np.ndarray:
    """What an energon user writes in encode_sample: full decode, shorter side to `target`, center crop."""
    img = Image.open(io.BytesIO(data)).convert("RGB")
    w, h = img.size
    scale = target / min(w, h)
    img = img.resize((max(target, round(w * scale)), max(target, round(h * scale))), BILINEAR)
    left, top = (img.size[0] - target) // 2, (img.size[1] - target) // 2
    return np.asarray(img.crop((left, top, left + target, top + target)))


def test_close_to_full_decode_resize_then_center_crop():
    """Against the plain way (full decode, resize, crop) on images of 0.6x-4x the target: the differences come from
    the reduced-scale decode (libjpeg's DCT scaling, a block filter before the bilinear one, at 2x and more) and
    the box rounded to whole decoded pixels (a shift of at most half a decoded pixel). These images are strongly
    coloured 16-pixel cells (far more contrast at the target's scale than photos), so the bounds are loose."""
    rng = np.random.default_rng(11)
    means = []
    for h, w in [(88, 86), (326, 219), (296, 50), (214, 93), (184, 374), (92, 224), (398, 139), (40, 120)]:
        data = jpeg_bytes(rng, h, w)
        ours = resized_pixels(data, "RGB", image_options(size=64), 0).transpose(1, 2, 0)
        diff = np.abs(ours.astype(np.int16) - _resize_then_center_crop(data, 64))
        assert diff.mean() <= 12 and np.percentile(diff, 99) <= 40, (h, w)
        means.append(diff.mean())
    assert np.mean(means) <= 6


def test_every_output_form_has_the_same_pixels():
    rng = np.random.default_rng(5)
    data = jpeg_bytes(rng, 150, 90)
    size = (24, 20)
    base = decode_image(data, IMAGE_SPECS["rgb8"], image_options(size=size))
    assert base.shape == (24, 20, 3) and base.dtype == np.uint8
    chw = decode_image(data, IMAGE_SPECS["torchrgb8"], image_options(size=size))
    np.testing.assert_array_equal(chw.numpy(), base.transpose(2, 0, 1))
    hwc = decode_image(data, IMAGE_SPECS["torchrgb8"], image_options(size=size, layout="HWC"))
    np.testing.assert_array_equal(hwc.numpy(), base)
    floats = decode_image(data, IMAGE_SPECS["torchrgb"], image_options(size=size))
    np.testing.assert_array_equal(floats.numpy(), base.transpose(2, 0, 1) / np.float32(255))
    pil = decode_image(data, IMAGE_SPECS["pil"], image_options(size=size))
    assert pil.mode == "RGB" and pil.size == (20, 24)
    np.testing.assert_array_equal(np.asarray(pil), base)
    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
    norm = decode_image(data, IMAGE_SPECS["rgb"], image_options(size=size, normalize=(mean, std)))
    np.testing.assert_allclose(norm, (base / 255.0 - mean) / std, atol=1e-5)
    # into caller memory (the batch path), with and without the reused decode buffer
    for scratch in (None, DecodeScratch()):
        out = np.empty((3, 24, 20), np.float32)
        write_resized(data, "RGB", image_options(size=size), 0, out, "CHW", True, None, scratch)
        np.testing.assert_array_equal(out, floats.numpy())


def test_random_crop_box_inside_the_image():
    rng = np.random.default_rng(6)
    data = jpeg_bytes(rng, 80, 120)
    opts = image_options(size=(32, 32), crop="random")
    crops = {resized_pixels(data, "RGB", opts, seed).tobytes() for seed in range(6)}
    assert len(crops) > 1  # other seeds, other crops
    np.testing.assert_array_equal(resized_pixels(data, "RGB", opts, 3), resized_pixels(data, "RGB", opts, 3))
    for seed in range(50):
        left, top, right, bottom = crop_box(120, 80, (32, 32), "random", seed)
        assert 0 <= left < right <= 120 and 0 <= top < bottom <= 80
        assert right - left == pytest.approx(80) and bottom - top == pytest.approx(80)


def test_pixel_box_rounds_and_clamps():
    assert pixel_box((10.0, 0.0, 90.0, 80.0), 0.25, 30, 20) == (3, 0, 23, 20)  # 2.5 -> 3, 22.5 -> 23
    assert pixel_box((0.2, 0.2, 0.3, 0.3), 1.0, 8, 8) == (0, 0, 1, 1)  # at least one pixel
    assert pixel_box((7.8, 7.8, 8.0, 8.0), 1.0, 8, 8) == (7, 7, 8, 8)  # inside the image
