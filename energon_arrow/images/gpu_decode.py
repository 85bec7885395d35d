"""The training-process side of `image_device_decode=True`: the workers ship each image field as compressed bytes
(images/jpeg_bytes.py) and this stage decodes them after the batch arrived, in batches on the loader's device -
torchvision's `decode_jpeg(list, device=...)`, nvjpeg on CUDA, the CPU decoder otherwise - into the batch tensor
on that device (uint8, or float / normalised per the decoder's options, zero-padded like the workers' batches).

Images the batched decoder does not take (not a JPEG, CMYK, arithmetic coding: see `jpeg_components`) or rejects
(a batch that fails is retried image by image) are decoded one by one with Pillow, the workers' decoder. An image
that Pillow cannot decode either follows the loader's error policy: a `DecodeError` naming shard, key and part,
or with `skip_errors=True` the sample is dropped from the batch and counted against `error_budget`; by default
(energon's) each failure goes to the worker config's error handler and the sample is dropped.

Pixels: one-channel output from a colour JPEG is computed from the decoded RGB with Pillow's integer luma
formula, four-channel output gets an opaque alpha (Pillow's conversions), so the CPU decoder, which uses
libjpeg-turbo like Pillow, gives Pillow's pixels; nvjpeg's IDCT and chroma upsampling differ from libjpeg's by a
few levels per pixel.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import torch

from energon_arrow.images import jpeg_bytes
from energon_arrow.images.decode import ImageSpec, decode_image
from energon_arrow.images.decode_into import ImageOptions, pixel_shape
from energon_arrow.images.device import image_fields
from energon_arrow.images.jpeg_bytes import CompressedImages
from energon_arrow.loader.errors import DecodeError, ErrorBudgetExceeded
from energon_arrow.loader.transfer import cuda_target

# Pillow's L = (19595 R + 38470 G + 7471 B + 0x8000) >> 16 (its RGB -> L conversion)
_LUMA = (19595, 38470, 7471)
_PLAIN = ImageOptions()


def decode_device(device) -> torch.device:
    """Where images are decoded: the loader's CUDA target, else the CPU."""
    cuda = cuda_target(device)
    return cuda if cuda is not None else torch.device("cpu")


def _batched(decode: Callable, views: list, mode: str, device: torch.device) -> list:
    """Each image decoded (C, H, W) uint8 on `device`, or None where the batched decoder rejects it."""
    try:
        return list(decode(views, mode=mode, device=device))
    except Exception:  # one bad image fails the whole call: find it
        out = []
        for v in views:
            try:
                out.append(decode([v], mode=mode, device=device)[0])
            except Exception:
                out.append(None)
        return out


def _channels(img: torch.Tensor, channels: int) -> torch.Tensor:
    """A decoded L / RGB image as `channels` channels, with Pillow's conversions."""
    have = img.shape[0]
    if have == channels:
        return img
    if channels == 1:  # RGB -> L
        w = torch.tensor(_LUMA, dtype=torch.int32, device=img.device).view(3, 1, 1)
        return (
            ((img.to(torch.int32) * w).sum(0, keepdim=True) + 0x8000).bitwise_right_shift(16).to(torch.uint8)
        )
    rgb = img.expand(3, -1, -1) if have == 1 else img
    if channels == 3:
        return rgb
    alpha = torch.full((1, *img.shape[1:]), 255, dtype=torch.uint8, device=img.device)
    return torch.cat([rgb, alpha])


def _pillow(ci: CompressedImages, i: int, mode: str, device: torch.device) -> torch.Tensor:
    """Image `i` decoded by the workers' decoder (Pillow), (C, H, W) uint8 on `device`."""
    pixels = decode_image(ci.payload_bytes(i), ImageSpec("torch", False, mode), _PLAIN)
    return (pixels if pixels.dim() == 3 else pixels[None]).to(device)


def decode_pixels(
    ci: CompressedImages, mode: str, device: torch.device, decode: Callable
) -> tuple[list, dict[int, BaseException]]:
    """Every image of `ci` as (C, H, W) uint8 on `device` in Pillow `mode` (None where it failed), and the
    failures {index: exception}."""
    n, comps, views = len(ci), ci.components, ci.payloads()
    if mode == "L":  # grey JPEGs decode to grey, colour ones to RGB (then Pillow's luma)
        groups = [(np.flatnonzero(comps == 1), "GRAY"), (np.flatnonzero(comps == 3), "RGB")]
    else:
        groups = [(np.flatnonzero(comps > 0), "RGB")]
    images: list = [None] * n
    for idx, read_mode in groups:
        if len(idx):
            for i, img in zip(
                idx.tolist(), _batched(decode, [views[i] for i in idx.tolist()], read_mode, device)
            ):
                images[i] = None if img is None else _channels(img, len(mode))
    errors: dict[int, BaseException] = {}
    for i in range(n):
        if images[i] is None:
            try:
                images[i] = _pillow(ci, i, mode, device)
            except Exception as exc:
                errors[i] = exc
    return images, errors


def _region(t: torch.Tensor, h: int, w: int, chw: bool) -> torch.Tensor:
    return t[:, :h, :w] if chw else t[:h, :w]


def batch_tensor(images: list, channels: int, layout: str, as_float: bool, affine, device) -> torch.Tensor:
    """The images ((C, H, W) uint8, None = a failed one: zeros) in one batch tensor: [B, C, H, W], [B, H, W, C]
    or [B, H, W], zero-padded to the largest height and width; float32 / 255 or `x * scale + bias` with
    `affine`, padding staying 0 (as in the workers' batches)."""
    sizes = np.array([img.shape[1:] if img is not None else (0, 0) for img in images], np.int64).reshape(
        -1, 2
    )
    height, width = sizes.max(axis=0).tolist()
    padded = bool((sizes != (height, width)).any())
    chw = channels > 1 and layout == "CHW"
    shape = pixel_shape(height, width, channels, layout)
    views = [
        None if img is None else img[0] if channels == 1 else img if chw else img.permute(1, 2, 0)
        for img in images
    ]
    if not padded and all(v is not None for v in views):  # one kernel for the whole batch
        u8 = torch.stack(views) if views else torch.empty((0, *shape), dtype=torch.uint8, device=device)
    else:
        u8 = torch.zeros((len(images), *shape), dtype=torch.uint8, device=device)
        for i, (img, src) in enumerate(zip(images, views)):
            if img is not None:
                _region(u8[i], img.shape[1], img.shape[2], chw).copy_(src)
    if not as_float:
        return u8
    out = u8.to(torch.float32)
    if affine is None:
        return out.div_(255.0)
    scale, bias = (torch.from_numpy(a).to(device) for a in affine)
    if channels == 1:
        scale, bias = scale[0], bias[0]
    elif chw:
        scale, bias = scale.view(-1, 1, 1), bias.view(-1, 1, 1)
    out.mul_(scale).add_(bias)
    if padded:  # the normalised padding would be `bias`: back to 0
        valid = torch.zeros((len(images), height, width), dtype=torch.bool, device=device)
        for i, (h, w) in enumerate(sizes.tolist()):
            valid[i, :h, :w] = True
        out.masked_fill_(~(valid[:, None] if chw else (valid if channels == 1 else valid[..., None])), 0.0)
    return out


def drop_samples(batch: Any, keep: np.ndarray) -> Any:
    """`batch` (a sample dataclass of per-sample lists / tensors) without the samples where `keep` is False."""
    n, idx = len(keep), np.flatnonzero(keep)
    for f in dataclasses.fields(batch):
        value = getattr(batch, f.name)
        if isinstance(value, torch.Tensor) and value.dim() and value.shape[0] == n:
            setattr(batch, f.name, value[torch.from_numpy(idx).to(value.device)])
        elif isinstance(value, (list, tuple)) and len(value) == n:
            setattr(batch, f.name, type(value)(value[i] for i in idx.tolist()))
    return batch


class DeviceDecode:
    """Decodes the compressed image fields of a `Loader`'s batches (see the module docstring); `skipped` counts
    the samples dropped here."""

    def __init__(self, dataset, device):
        dec = dataset.decoder
        self.spec, self.options = dec.image_spec, dec.image_options
        self.fields = image_fields(dataset)
        self.device = decode_device(device)
        self.decode = jpeg_bytes.batched_jpeg_decoder()
        self.skip_errors, self.budget = dataset.settings.skip_errors, dataset.settings.error_budget
        self.hooks = dataset.hooks
        self.skipped = 0

    def __call__(self, batch: Any) -> Any:
        """`batch` with its image fields decoded (None when every sample of it was dropped)."""
        channels = len(self.spec.mode)
        as_float = self.spec.float or self.options.normalize is not None
        affine = self.options.affine(channels)
        failed: dict[int, tuple[str, BaseException]] = {}
        for name in self.fields:
            ci = getattr(batch, name, None)
            if not isinstance(ci, CompressedImages):
                continue  # a batch the worker built sample by sample: decoded there
            images, errors = decode_pixels(ci, self.spec.mode, self.device, self.decode)
            setattr(
                batch,
                name,
                batch_tensor(images, channels, self.options.layout, as_float, affine, self.device),
            )
            for i, exc in errors.items():
                failed.setdefault(i, (ci.part, exc))
        if not failed:
            self.hooks.loaded()
            return batch
        first = min(failed)
        part, exc = failed[first]
        # the samples' restore keys ((kind, shard, index), ...) end the batch's key (after the loader's prefix)
        sample_keys = batch.__restore_key__[len(batch.__restore_key__) - len(batch.__key__) :]
        error = DecodeError(sample_keys[first][1], batch.__key__[first], part, exc)
        if self.skip_errors is None:  # energon's: each to the error handler, the samples dropped
            for i, (part, exc) in sorted(failed.items()):
                shard = sample_keys[i][1]
                failure = DecodeError(shard, batch.__key__[i], part, exc)
                self.hooks.load_failed(failure, {"__key__": batch.__key__[i], "__shard__": shard})
            self.skipped += len(failed)
        elif not self.skip_errors:
            raise error from exc
        else:
            self.skipped += len(failed)
        if self.skip_errors and self.skipped > self.budget:
            raise ErrorBudgetExceeded(
                f"{self.skipped} samples skipped while decoding images, over the error budget of {self.budget}; "
                f"last: {error}"
            ) from exc
        keep = np.ones(len(batch.__key__), bool)
        keep[list(failed)] = False
        return drop_samples(batch, keep) if keep.any() else None


def device_decoded(batches: Iterable[Any], decoder: DeviceDecode | None) -> Iterator[Any]:
    """`batches` with their compressed image fields decoded by `decoder` (as they are without one)."""
    if decoder is None:
        yield from batches
        return
    for batch in batches:
        out = decoder(batch)
        if out is not None:
            yield out


def device_decoder(dataset, device) -> DeviceDecode | None:
    """The stage a `Loader` runs when its dataset's decoder has `image_device_decode=True`."""
    if not getattr(dataset.decoder, "image_device_decode", False) or not image_fields(dataset):
        return None
    return DeviceDecode(dataset, device)
