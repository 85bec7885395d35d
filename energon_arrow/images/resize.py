"""Target-size decoding (`ImageOptions.size`): each image scaled so that it covers the target h x w (aspect kept)
and cropped to it, at the center or at a random offset - what energon users write in `encode_sample`, with less
work. The pixels are, exactly:

1. Decode: a JPEG is decoded at the reduced scale 1/s (libjpeg's DCT scaling, Pillow's `draft`; s in 1, 2, 4, 8),
   the largest s that keeps at least the resolution the crop is scaled to (Pillow's rule: s <= the image's size
   divided by its size at the crop's scale, per side), so the resampling below never enlarges what the full
   decode would not; other formats are decoded at full size. Then converted to the requested Pillow mode.
2. Box: the crop box in source pixels - the target's aspect at the scale where the image covers the target, at the
   center or at a random offset (`crop_box`) - is divided by s and rounded to whole pixels of the decoded image.
3. Resize: that region alone (no pixel outside it contributes) is resized to h x w with torch's antialiased
   bilinear filter on uint8 (`interpolate(mode="bilinear", antialias=True)`, Pillow's BILINEAR filter, vectorised:
   within 2 levels of Pillow's `img.crop(box).resize((w, h), BILINEAR)`, about 3x faster).
Float output then divides by 255 (or normalises) like the full-size modes.
"""

from __future__ import annotations

import io
import math

import numpy as np

from energon_arrow.images.decode_into import ImageOptions, open_image, pixel_view, store_pixels


def crop_box(
    width: int, height: int, target: tuple[int, int], crop: str, seed: int
) -> tuple[float, float, float, float]:
    """The source box (left, top, right, bottom) that scales to `target` (h, w) covering it, aspect kept."""
    th, tw = target
    scale = max(th / height, tw / width)
    bw, bh = tw / scale, th / scale
    if crop == "center":
        fx = fy = 0.5
    else:
        fx, fy = np.random.default_rng(seed & 0xFFFFFFFFFFFFFFFF).random(2).tolist()
    left, top = max(0.0, (width - bw) * fx), max(0.0, (height - bh) * fy)
    return left, top, min(float(width), left + bw), min(float(height), top + bh)


def pixel_box(
    box: tuple[float, float, float, float], scale: float, width: int, height: int
) -> tuple[int, int, int, int]:
    """A source box scaled by `scale` (the decoded image's size / the source's) and rounded to whole pixels of the
    decoded image (`width` x `height`), at least one pixel wide and high."""
    left, top, right, bottom = (math.floor(v * scale + 0.5) for v in box)
    left, top = min(left, width - 1), min(top, height - 1)
    return left, top, max(left + 1, min(right, width)), max(top + 1, min(bottom, height))


def _decoded(data, mode: str, options: ImageOptions, seed: int, scratch):
    """The payload decoded (at reduced scale where the format allows) and converted to `mode`, and the crop's
    pixel box in it."""
    from PIL import Image

    img = Image.open(io.BytesIO(data))
    w, h = img.size
    box = crop_box(w, h, options.size, options.crop, seed)
    th, tw = options.size
    try:
        drafted = img.draft(
            None, (math.ceil(w * tw / (box[2] - box[0])), math.ceil(h * th / (box[3] - box[1])))
        )
    except BaseException:
        img.close()
        raise
    scale = drafted[1][2] / w if drafted is not None else 1.0  # draft's box: (0, 0, w / s, h / s)
    out = open_image(data, mode, img, scratch)
    return out, pixel_box(box, scale, *out.size)


def resized_pixels(data, mode: str, options: ImageOptions, seed: int, scratch=None) -> np.ndarray:
    """The uint8 pixels of one payload at `options.size` (see the module docstring): (h, w) for one channel, else
    (c, h, w) planes (any strides). `scratch`: a DecodeScratch to decode JPEGs into (images/scratch.py)."""
    import torch

    img, (left, top, right, bottom) = _decoded(data, mode, options, seed, scratch)
    held = scratch.pixels(img) if scratch is not None else None
    region = (pixel_view(img) if held is None else held)[top:bottom, left:right]
    if not region.flags.writeable:  # Pillow's own memory: torch wants writable arrays
        region = region.copy()
    x = torch.from_numpy(region)
    # 4-byte RGB pixels are resized whole (the 4-channel kernel is the fast one), the padding dropped after
    x = x[None, None] if x.ndim == 2 else x.permute(2, 0, 1)[None]
    res = torch.nn.functional.interpolate(
        x, size=options.size, mode="bilinear", antialias=True, align_corners=False
    )
    return res[0, 0].numpy() if region.ndim == 2 else res[0, : len(mode)].numpy()


def write_resized(
    data,
    mode: str,
    options: ImageOptions,
    seed: int,
    out: np.ndarray,
    layout: str,
    as_float: bool,
    affine,
    scratch=None,
) -> None:
    """One payload at `options.size` written into `out` (shape `pixel_shape(h, w, channels, layout)`, uint8 or
    float32), converted as `store_pixels` does."""
    planes = resized_pixels(data, mode, options, seed, scratch)
    src = planes if planes.ndim == 2 or layout == "CHW" else planes.transpose(1, 2, 0)
    store_pixels(src, out, layout, as_float, affine)


def resized_image(data, mode: str, options: ImageOptions, seed: int):
    """One payload at `options.size` as a PIL image of `mode`."""
    from PIL import Image

    planes = resized_pixels(data, mode, options, seed)
    return Image.fromarray(np.ascontiguousarray(planes if planes.ndim == 2 else planes.transpose(1, 2, 0)))
