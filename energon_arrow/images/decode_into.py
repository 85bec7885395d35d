"""Decode one image payload into caller-provided memory: the shared step of per-sample decoding
(images/decode.py) and of decoding a whole batch into its slot (images/batch.py).

`ImageOptions` are our opt-in extras on top of energon's `image_decode` modes:
- `size=(h, w)`: the image is scaled (bilinear, antialiased) so that it covers h x w, keeping its aspect ratio,
  and cropped to exactly h x w, at the center or at a random offset drawn from a per-sample seed; JPEGs are
  decoded at a reduced scale first (exactly what happens: images/resize.py);
- `layout`: "CHW" (energon's torch layout) or "HWC" for torch modes;
- `normalize=(mean, std)`: float output `(x / 255 - mean) / std` per channel, computed in one fused
  multiply-add (`x * scale + bias`).
Without options the pixels are energon's exactly: float modes divide the uint8 pixels by 255 in float32.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np

IMAGE_CROPS = ("center", "random")
IMAGE_LAYOUTS = ("CHW", "HWC")
_U8_MAX = np.float32(255.0)


@dataclass(frozen=True)
class ImageOptions:
    size: tuple[int, int] | None = None
    crop: str = "center"
    layout: str = "CHW"
    normalize: tuple[tuple[float, ...], tuple[float, ...]] | None = None

    @property
    def is_default(self) -> bool:
        return self == ImageOptions()

    def affine(self, channels: int) -> tuple[np.ndarray, np.ndarray] | None:
        """(scale, bias) per channel, float32, with `x * scale + bias == (x / 255 - mean) / std`; None when not
        normalising."""
        if self.normalize is None:
            return None
        mean, std = (np.broadcast_to(np.asarray(v, np.float64), (channels,)) for v in self.normalize)
        return (1.0 / (255.0 * std)).astype(np.float32), (-mean / std).astype(np.float32)


def image_options(
    size: int | tuple[int, int] | None = None,
    crop: str = "center",
    layout: str = "CHW",
    normalize: tuple | None = None,
) -> ImageOptions:
    """Validated ImageOptions (clear errors naming the argument)."""
    if size is not None:
        pair = (size, size) if isinstance(size, int) else tuple(size)
        if len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in pair):
            raise ValueError(f"image_size must be a positive int or an (height, width) pair, got {size!r}")
        size = pair
    if crop not in IMAGE_CROPS:
        raise ValueError(f"image_crop must be one of {IMAGE_CROPS}, got {crop!r}")
    if layout not in IMAGE_LAYOUTS:
        raise ValueError(f"image_layout must be one of {IMAGE_LAYOUTS}, got {layout!r}")
    if normalize is not None:
        try:
            mean, std = normalize
            mean = tuple(float(v) for v in np.atleast_1d(mean))
            std = tuple(float(v) for v in np.atleast_1d(std))
        except (TypeError, ValueError):
            raise ValueError(f"image_normalize must be a (mean, std) pair, got {normalize!r}") from None
        if len(mean) not in (1, 3, 4) or len(std) not in (1, 3, 4) or not all(s > 0 for s in std):
            raise ValueError(
                f"image_normalize: mean and std need 1, 3 or 4 values (std > 0), got {normalize!r}"
            )
        normalize = (mean, std)
    return ImageOptions(size, crop, layout, normalize)


def open_image(data, mode: str, img=None, scratch=None):
    """The decoded PIL image of one payload at full size, in Pillow `mode`. `img`: the payload already opened
    (header read) by the caller, else it is opened here. `scratch`: a DecodeScratch to decode into
    (images/scratch.py); the image's pixels are then valid until its next use. (Target sizes: images/resize.py.)"""
    from PIL import Image

    if img is None:
        img = Image.open(io.BytesIO(data))
    try:
        if scratch is None:
            img.load()
        else:
            scratch.load(img)
        # a same-mode convert would only copy (energon converts unconditionally: the same pixels)
        out = img if img.mode == mode else img.convert(mode)
    except BaseException:
        img.close()
        raise
    if out is not img:
        img.close()
    return out


def pixel_view(img) -> np.ndarray:
    """The uint8 pixels of a loaded L / RGB / RGBA image as Pillow holds them, (h, w) or (h, w, step) with
    step >= channels (RGB pixels take 4 bytes): a view of Pillow's own memory through its Arrow export where
    possible (Pillow >= 11.2, one contiguous block), else a packed copy (h, w, channels)."""
    w, h = img.size
    if not hasattr(img, "__arrow_c_array__"):  # Pillow < 11.2
        return np.asarray(img)
    try:
        import pyarrow as pa

        buf = pa.array(img).buffers()[-1]
    except (AttributeError, TypeError, ValueError, NotImplementedError):
        return np.asarray(img)
    step = buf.size // (w * h) if w * h else 0
    if step * w * h != buf.size or step < len(img.mode):
        return np.asarray(img)
    flat = np.frombuffer(buf, np.uint8)
    if len(img.mode) == 1 and step == 1:
        return flat.reshape(h, w)
    return flat.reshape(h, w, step)


def pixel_shape(height: int, width: int, channels: int, layout: str) -> tuple[int, ...]:
    """The shape of one image's pixels: (h, w) for one channel, else (c, h, w) or (h, w, c)."""
    if channels == 1:
        return (height, width)
    return (channels, height, width) if layout == "CHW" else (height, width, channels)


def write_pixels(img, out: np.ndarray, layout: str, as_float: bool, affine, scratch=None) -> None:
    """The pixels of a PIL image written into `out` (shape `pixel_shape(...)`, uint8 or float32): uint8 copied,
    float divided by 255 (energon's exact values) or normalised with `affine` = (scale, bias). `scratch`: the
    caller's DecodeScratch (`img` may live there; it also holds the uint8 planes a float CHW image is converted
    from, one contiguous cast and divide instead of a strided one)."""
    channels = len(img.mode)
    held = scratch.pixels(img) if scratch is not None else None
    if channels > 1 and layout == "HWC":
        # Pillow's memory holds 4 bytes per RGB pixel: its packer makes HWC rows faster than a strided copy
        held, arr = None, np.asarray(img)
    else:
        held = pixel_view(img) if held is None else held
        arr = held if held.ndim == 2 else held[..., :channels]
    chw = arr.ndim == 3 and layout == "CHW"
    src = arr.transpose(2, 0, 1) if chw else arr
    if chw and scratch is not None and held.shape[2] == 4 and held.flags.c_contiguous:
        # 4-byte pixels: uint8 planes by whole-word shifts (into `out`, or a scratch buffer to convert from)
        src = out if not as_float else scratch.planes_buffer(out.shape)
        scratch.planes(held, src)
        if not as_float:
            return
    store_pixels(src, out, layout, as_float, affine)


def store_pixels(src: np.ndarray, out: np.ndarray, layout: str, as_float: bool, affine) -> None:
    """uint8 pixels `src` (the shape of `out`, any strides) written into `out`: copied (uint8 `out`), divided by
    255 in float32 (energon's values) or normalised with `affine` = (scale, bias) per channel."""
    if not as_float:
        np.copyto(out, src)
        return
    if src.flags.c_contiguous:
        np.copyto(out, src)  # contiguous uint8 -> float32: one vectorised cast, then in place
        src = out
    if affine is None:
        np.divide(src, _U8_MAX, out=out, dtype=np.float32)
        return
    scale, bias = affine
    if out.ndim == 3 and layout == "CHW":
        scale, bias = scale[:, None, None], bias[:, None, None]
    elif out.ndim == 2:
        scale, bias = scale[0], bias[0]
    np.multiply(src, scale, out=out, dtype=np.float32)
    out += bias
