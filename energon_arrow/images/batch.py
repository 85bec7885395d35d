"""One image field of a columnar batch decoded straight into its batch tensor (a shared-memory slot, see
images/slots.py): no per-sample tensor, no stacking; the uint8 -> float conversion (or normalisation) is the one
pass that writes each image into the batch.

Batching follows energon's: images of different sizes are zero-padded to the largest height and width of the
batch (energon's `batch_pad_stack`); with a target size every image already has it.
"""

from __future__ import annotations

import io

import numpy as np
import torch

from energon_arrow.images.decode_into import open_image, pixel_shape, write_pixels
from energon_arrow.images.resize import write_resized
from energon_arrow.samples.decoders import ImageDecode


def _open_all(payloads: list) -> tuple[list, np.ndarray]:
    """Every payload opened (header read, nothing decoded yet) and their (width, height)."""
    from PIL import Image

    images = [Image.open(io.BytesIO(data)) for data in payloads]
    return images, np.array([img.size for img in images], np.int64).reshape(-1, 2)


def _place(out: np.ndarray, height: int, width: int, layout: str, channels: int) -> np.ndarray:
    """The (height, width) top-left region of one padded image in `out`; the rest of `out` is zeroed."""
    if channels > 1 and layout == "CHW":
        out[:, height:, :] = 0
        out[:, :height, width:] = 0
        return out[:, :height, :width]
    out[height:] = 0
    out[:height, width:] = 0
    return out[:height, :width]


def image_column(
    payloads: list, dec: ImageDecode, seeds: list[int], alloc, field: str, device_normalize: bool
) -> torch.Tensor:
    """The batch tensor of one torch-mode image field. With `device_normalize` a normalised uint8-mode field stays
    uint8 (the main process normalises it on the GPU, see images/device.py)."""
    spec, opts = dec.spec, dec.options
    channels = len(spec.mode)
    cpu_norm = opts.normalize is not None and (spec.float or not device_normalize)
    as_float = spec.float or cpu_norm
    affine = opts.affine(channels) if cpu_norm else None
    dtype = torch.float32 if as_float else torch.uint8
    n = len(payloads)
    if opts.size is not None:
        out = alloc.tensor((n, *pixel_shape(*opts.size, channels, opts.layout)), dtype, field)
        arr = out.numpy()
        for i, (data, seed) in enumerate(zip(payloads, seeds)):
            write_resized(data, spec.mode, opts, seed, arr[i], opts.layout, as_float, affine, alloc.scratch)
        return out
    images, sizes = _open_all(payloads)
    width, height = sizes.max(axis=0).tolist()
    out = alloc.tensor((n, *pixel_shape(height, width, channels, opts.layout)), dtype, field)
    arr = out.numpy()
    padded = bool((sizes != (width, height)).any())
    for i, (data, (w, h), opened) in enumerate(zip(payloads, sizes.tolist(), images)):
        img = open_image(data, spec.mode, opened, alloc.scratch)
        if img.size != (w, h):
            raise ValueError(f"image {i}: header says {w}x{h}, decoded {img.size[0]}x{img.size[1]}")
        dst = _place(arr[i], h, w, opts.layout, channels) if padded else arr[i]
        write_pixels(img, dst, opts.layout, as_float, affine, alloc.scratch)
    return out
