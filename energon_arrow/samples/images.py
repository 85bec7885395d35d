"""Image decoding with energon's `image_decode` modes (webdataset's image specs), from Pillow.

A mode names the result type (numpy HWC / torch CHW / PIL image), the element type (uint8 `...8`, else float32
in [0, 1]) and the channels (l, rgb, rgba): e.g. "torchrgb" -> float32 CHW RGB, "rgb8" -> uint8 HWC RGB,
"pil" -> an RGB PIL image.
"""

from __future__ import annotations

import io
from typing import Any, NamedTuple

import numpy as np


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


def check_image_mode(mode: str) -> ImageSpec:
    if mode not in IMAGE_SPECS:
        raise ValueError(f"image_decode must be one of {sorted(IMAGE_SPECS)}, got {mode!r}")
    return IMAGE_SPECS[mode]


def decode_image(data, spec: ImageSpec) -> Any:
    """An image payload decoded as `spec` describes."""
    try:
        from PIL import Image
    except ImportError:
        raise ImportError("decoding an image part needs Pillow (pip install pillow)") from None
    with Image.open(io.BytesIO(data)) as img:
        img.load()
        img = img.convert(spec.mode)
    if spec.kind == "pil":
        return img
    arr = np.asarray(img)
    if spec.float:
        arr = arr.astype(np.float32) / np.float32(255.0)
    if spec.kind == "numpy":
        return arr
    import torch

    return torch.from_numpy(np.ascontiguousarray(arr.transpose(2, 0, 1)) if arr.ndim == 3 else arr.copy())
