"""A reusable decode target for the images of a batch: JPEGs are decoded into memory allocated once (per worker)
instead of a fresh Pillow image each, and their pixels leave it in one vectorised pass.

Why: Pillow allocates (and zeroes) new image memory for every decoded image and frees it after; for a 384 x 384
RGB image (590 KB) that costs about a third of the decode itself, and the pixels then land in cold memory. Here a
JPEG (the common case, where Pillow's decoder writes into the image memory it is given) is decoded into a numpy
buffer mapped as the Pillow image's memory (`Image.core.map_buffer`, what `Image.frombuffer` uses), so the pixels
are readable as a numpy view without any export or copy, and the buffer stays hot in the cache.
Other formats, and JPEGs Pillow decodes its own way (multi-tile, CMYK), are loaded by Pillow as usual.

The decoded pixels are those of `img.load()`: only where they live differs. A scratch is single-threaded (one per
worker iteration) and its pixels are valid until its next `load`: callers copy them out first.
"""

from __future__ import annotations

import numpy as np

# Pillow mode -> bytes per pixel in Pillow's image memory (RGB pixels are stored as 4 bytes, the 4th is padding)
_STEP = {"L": 1, "RGB": 4}


class DecodeScratch:
    """Reusable image memory for decoding one image at a time."""

    def __init__(self) -> None:
        self._buf = np.empty(0, np.uint32)  # uint32: rows of 4-byte pixels stay aligned for the uint32 view
        self._key: tuple | None = None
        self._core = None
        self._tmp = np.empty(0, np.uint32)
        self._planes = np.empty(0, np.uint8)

    def load(self, img) -> np.ndarray | None:
        """Decode `img` (opened, not loaded yet) into this scratch; its pixels as a view, (h, w) for L and
        (h, w, 4) for RGB (4th byte padding), or None when Pillow loaded it into its own memory instead (other
        formats; a Pillow that ignores the memory it is given)."""
        if img.format != "JPEG" or img.mode not in _STEP or len(img.tile) != 1:
            img.load()
            return None
        w, h = img.size
        step = _STEP[img.mode]
        nbytes = w * h * step
        key = (img.mode, w, h)
        if self._key != key:
            if self._buf.nbytes < nbytes:
                self._buf = np.empty(-(-nbytes // 4), np.uint32)
            from PIL import Image

            self._core = Image.core.map_buffer(self._buf, (w, h), "raw", 0, (img.mode, 0, 1))
            self._key = key
        img.im = self._core
        img.load()
        return self.pixels(img)

    def pixels(self, img) -> np.ndarray | None:
        """The pixels of a loaded `img` when they live in this scratch (see `load`), else None."""
        if self._core is None or img.im is not self._core:
            return None
        mode, w, h = self._key
        step = _STEP[mode]
        flat = self._buf.view(np.uint8)[: w * h * step]
        return flat.reshape(h, w) if step == 1 else flat.reshape(h, w, step)

    def planes_buffer(self, shape: tuple[int, ...]) -> np.ndarray:
        """A reused uint8 buffer of `shape` (the planes of an image on their way to float)."""
        n = int(np.prod(shape))
        if self._planes.size < n:
            self._planes = np.empty(n, np.uint8)
        return self._planes[:n].reshape(shape)

    def planes(self, rgbx: np.ndarray, out: np.ndarray) -> None:
        """The first `len(out)` channels of contiguous 4-byte pixels `rgbx` (h, w, 4) written as uint8 planes into
        `out` (c, h, w): each plane is one shift of the pixels read as uint32 and one truncating cast (contiguous
        passes, about twice as fast as a strided transpose)."""
        h, w = rgbx.shape[:2]
        words = rgbx.reshape(-1).view(np.uint32).reshape(h, w)
        if self._tmp.size < h * w:
            self._tmp = np.empty(h * w, np.uint32)
        tmp = self._tmp[: h * w].reshape(h, w)
        for c in range(out.shape[0]):
            # native words hold channel c in bits 8c..8c+7 (little-endian) or 24-8c..31-8c (big-endian)
            shift = 8 * c if np.little_endian else 24 - 8 * c
            src = words if shift == 0 else np.right_shift(words, shift, out=tmp)
            np.copyto(out[c], src, casting="unsafe")
