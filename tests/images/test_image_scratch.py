"""DecodeScratch: JPEGs decoded into one reused buffer give Pillow's own pixels; everything else is loaded by Pillow
as usual; the uint8 planes written from 4-byte pixels equal a plain transpose."""

from __future__ import annotations

import io

import numpy as np
import pytest

from energon_arrow.images.decode_into import open_image, write_pixels
from energon_arrow.images.scratch import DecodeScratch
from energon_arrow.testing.images import jpeg_bytes

Image = pytest.importorskip("PIL.Image")


def _reference(data: bytes, mode: str) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as img:
        return np.asarray(img.convert(mode))


def _png(rng, h, w) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def test_jpegs_of_changing_sizes_decode_into_one_buffer():
    rng = np.random.default_rng(0)
    scratch = DecodeScratch()
    sizes = [(40, 56), (40, 56), (64, 24), (8, 8), (40, 56)]
    for h, w in sizes:
        data = jpeg_bytes(rng, h, w)
        img = Image.open(io.BytesIO(data))
        held = scratch.load(img)
        assert held is not None and held.shape == (h, w, 4)
        assert scratch.pixels(img) is not None
        np.testing.assert_array_equal(held[..., :3], _reference(data, "RGB"))
        np.testing.assert_array_equal(
            np.asarray(img), _reference(data, "RGB")
        )  # Pillow reads the same memory


def test_grayscale_jpeg_held_and_png_left_to_pillow():
    rng = np.random.default_rng(1)
    scratch = DecodeScratch()
    gray = jpeg_bytes(rng, 30, 20, mode="L")
    img = Image.open(io.BytesIO(gray))
    held = scratch.load(img)
    assert held is not None and held.shape == (30, 20)
    np.testing.assert_array_equal(held, _reference(gray, "L"))
    png = _png(rng, 12, 9)
    img = Image.open(io.BytesIO(png))
    assert scratch.load(img) is None and scratch.pixels(img) is None
    np.testing.assert_array_equal(np.asarray(img), _reference(png, "RGB"))


@pytest.mark.parametrize("layout", ["CHW", "HWC"])
@pytest.mark.parametrize("as_float", [False, True])
def test_write_pixels_same_with_and_without_scratch(layout, as_float):
    rng = np.random.default_rng(2)
    data = jpeg_bytes(rng, 33, 47)
    shape = (3, 33, 47) if layout == "CHW" else (33, 47, 3)
    dtype = np.float32 if as_float else np.uint8
    plain, held = np.empty(shape, dtype), np.empty(shape, dtype)
    write_pixels(open_image(data, "RGB"), plain, layout, as_float, None)
    scratch = DecodeScratch()
    write_pixels(open_image(data, "RGB", scratch=scratch), held, layout, as_float, None, scratch)
    np.testing.assert_array_equal(plain, held)
    ref = _reference(data, "RGB")
    expected = ref.transpose(2, 0, 1) if layout == "CHW" else ref
    np.testing.assert_array_equal(plain, expected / np.float32(255) if as_float else expected)


def test_planes_into_strided_destination():
    """The padded batch case: planes land in the top-left region of a larger image."""
    rng = np.random.default_rng(3)
    rgbx = rng.integers(0, 256, (5, 7, 4), dtype=np.uint8)
    out = np.zeros((3, 9, 11), np.uint8)
    DecodeScratch().planes(rgbx, out[:, :5, :7])
    np.testing.assert_array_equal(out[:, :5, :7], rgbx[..., :3].transpose(2, 0, 1))
    assert not out[:, 5:].any() and not out[:, :, 7:].any()
