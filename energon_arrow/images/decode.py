"""Image decoding with energon's `image_decode` modes (webdataset's image specs), from Pillow.

A mode names the result type (numpy HWC / torch CHW / PIL image), the element type (uint8 `...8`, else float32
in [0, 1]) and the channels (l, rgb, rgba): e.g. "torchrgb" -> float32 CHW RGB, "rgb8" -> uint8 HWC RGB,
"pil" -> an RGB PIL image.
"""

from __future__ import annotations

import zlib
from typing import Any, NamedTuple

import numpy as np

from energon_arrow.images.decode_into import ImageOptions, open_image, pixel_shape, write_pixels
from energon_arrow.images.resize import resized_image, write_resized


class ImageSpec(NamedTuple):
    kind: str  # "numpy", "torch" or "pil"
    float: bool  # float32 in [0, 1] instead of uint8 (numpy / torch only)
    mode: str  # Pillow mode: "L", "RGB" or "RGBA"


IMAGE_SPECS: dict[str, ImageSpec] = {
    "l8": ImageSpec("numpy", False, "L"),
    "rgb8": ImageSpec("numpy", False, "RGB"),
    "rgba8": ImageSpec("numpy", False, "RGBA"),
    "l": ImageSpec("numpy", True, "L"),
    "rgb": ImageSpec("numpy", True, "RGB"),
    "rgba": ImageSpec("numpy", True, "RGBA"),
    "torchl8": ImageSpec("torch", False, "L"),
    "torchrgb8": ImageSpec("torch", False, "RGB"),
    "torchrgba8": ImageSpec("torch", False, "RGBA"),
    "torchl": ImageSpec("torch", True, "L"),
    "torchrgb": ImageSpec("torch", True, "RGB"),
    "torch": ImageSpec("torch", True, "RGB"),
    "torchrgba": ImageSpec("torch", True, "RGBA"),
    "pill": ImageSpec("pil", False, "L"),
    "pil": ImageSpec("pil", False, "RGB"),
    "pilrgb": ImageSpec("pil", False, "RGB"),
    "pilrgba": ImageSpec("pil", False, "RGBA"),
}

# The extensions energon hands to the image decoder (those Pillow can open), compared lower-cased.
IMAGE_EXTENSIONS = frozenset(
    [
        "blp",
        "bmp",
        "dib",
        "bufr",
        "cur",
        "pcx",
        "dcx",
        "dds",
        "ps",
        "eps",
        "fit",
        "fits",
        "fli",
        "flc",
        "ftc",
        "ftu",
        "gbr",
        "gif",
        "grib",
        "h5",
        "hdf",
        "png",
        "apng",
        "jp2",
        "j2k",
        "jpc",
        "jpf",
        "jpx",
        "j2c",
        "icns",
        "ico",
        "im",
        "iim",
        "tif",
        "tiff",
        "jfif",
        "jpe",
        "jpg",
        "jpeg",
        "mpg",
        "mpeg",
        "msp",
        "pcd",
        "pxr",
        "pbm",
        "pgm",
        "ppm",
        "pnm",
        "psd",
        "bw",
        "rgb",
        "rgba",
        "sgi",
        "ras",
        "tga",
        "icb",
        "vda",
        "vst",
        "webp",
        "wmf",
        "emf",
        "xbm",
        "xpm",
    ]
)


DEFAULT_OPTIONS = ImageOptions()


def check_image_mode(mode: str) -> ImageSpec:
    if mode not in IMAGE_SPECS:
        raise ValueError(f"image_decode must be one of {sorted(IMAGE_SPECS)}, got {mode!r}")
    return IMAGE_SPECS[mode]


def spec_channels(spec: ImageSpec) -> int:
    return len(spec.mode)


def decode_image(
    data, spec: ImageSpec, options: ImageOptions = DEFAULT_OPTIONS, seed: int | None = None
) -> Any:
    """An image payload decoded as `spec` describes (with our `options`, see images/decode_into.py).
    `seed` draws a random crop; None seeds it from the payload's CRC32."""
    try:
        import PIL  # noqa: F401
    except ImportError:
        raise ImportError("decoding an image part needs Pillow (pip install pillow)") from None
    if seed is None and options.crop == "random":
        seed = zlib.crc32(data)
    seed = seed or 0
    channels = spec_channels(spec)
    if spec.kind == "pil":
        return (
            open_image(data, spec.mode)
            if options.size is None
            else resized_image(data, spec.mode, options, seed)
        )
    layout = options.layout if spec.kind == "torch" else "HWC"
    as_float = spec.float or options.normalize is not None
    dtype = np.float32 if as_float else np.uint8
    affine = options.affine(channels)
    if options.size is None:
        img = open_image(data, spec.mode)
        out = np.empty(pixel_shape(img.size[1], img.size[0], channels, layout), dtype)
        write_pixels(img, out, layout, as_float, affine)
    else:
        out = np.empty(pixel_shape(*options.size, channels, layout), dtype)
        write_resized(data, spec.mode, options, seed, out, layout, as_float, affine)
    if spec.kind == "numpy":
        return out
    import torch

    return torch.from_numpy(out)
