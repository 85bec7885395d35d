"""The main-process side of batched image decoding: the slot board a `Loader` sets up for its workers, and the
normalisation of uint8 image batches on the GPU after their asynchronous copy (`image_normalize` with a uint8
`image_decode` mode and a CUDA target; without CUDA the workers normalise on the CPU, fused into the decode)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch

from energon_arrow.images.slots import SlotBoard
from energon_arrow.loader.errors import LoaderError
from energon_arrow.loader.transfer import cuda_target
from energon_arrow.samples.decoders import ImageDecode


def image_fields(dataset) -> list[str]:
    """The batch fields the dataset decodes as torch-mode images into batch slots (columnar path)."""
    if not dataset.assembler.columnar:
        return []
    names = set()
    for builder in dataset.builders:
        for name, refs in builder.field_map.fields.items():
            fn = builder.decoder.handler(refs[0].part) if len(refs) == 1 else None
            if isinstance(fn, ImageDecode) and fn.spec.kind == "torch":
                names.add(name)
    return sorted(names)


def device_normalizes(dataset, device) -> bool:
    """Whether uint8 image batches cross to the GPU and are normalised there (image_normalize with a uint8 torch
    mode and a CUDA target)."""
    dec = dataset.decoder
    uint8_norm = dec.image_options.normalize is not None and not dec.image_spec.float
    return uint8_norm and bool(image_fields(dataset)) and cuda_target(device) is not None


def image_board(dataset, num_workers: int, prefetch_factor: int, device) -> SlotBoard | None:
    """The slot board for a loader of `dataset` (None when it decodes no image field into slots): enough slots
    per worker for the batches in flight (prefetch), the one the user holds and the one being released. With a CUDA
    target, the main process registers the slots of decoded batches in place (images/slots.py)."""
    device_decode = getattr(dataset.decoder, "image_device_decode", False)
    if not image_fields(dataset):
        if device_decode:
            raise LoaderError(
                "image_device_decode=True needs torch-mode image fields that the loader decodes a batch at a time "
                "(a field-mapped dataset with the default task encoder hooks); this dataset has none"
            )
        return None
    slots = (prefetch_factor if num_workers else 0) + 3
    # decoded batches crossing to a GPU DMA from their registered slots; compressed bytes are read by the decoder
    pin = cuda_target(device) if not device_decode else None
    return SlotBoard(max(1, num_workers), slots, device_normalizes(dataset, device), device_decode, pin)


def device_images(batches: Iterable[Any], dataset, device) -> Iterable[Any]:
    """`batches` on the device, normalised there when `device_normalizes` (else as they are)."""
    if not device_normalizes(dataset, device):
        return batches
    options = dataset.decoder.image_options
    affine = options.affine(len(dataset.decoder.image_spec.mode))
    return normalize_on_device(batches, image_fields(dataset), affine, options.layout)


def normalize_on_device(batches: Iterable[Any], fields: list[str], affine, layout: str) -> Iterator[Any]:
    """`batches` (already on the GPU) with their uint8 image `fields` converted to float32 and normalised in place
    of the field: `x * scale + bias` per channel (channel axis 1 for CHW, last for HWC)."""
    scale, bias = (torch.from_numpy(a) for a in affine)
    cache: dict = {}
    for batch in batches:
        for name in fields:
            x = getattr(batch, name)
            if not isinstance(x, torch.Tensor) or x.dtype != torch.uint8:
                continue
            key = (x.device, x.dim())
            if key not in cache:
                shape = [1] * x.dim()
                if x.dim() == 4:  # [B, C, H, W] or [B, H, W, C]; one-channel images are [B, H, W]
                    shape[1 if layout == "CHW" else 3] = len(scale)
                cache[key] = tuple(a[: max(shape)].reshape(shape).to(x.device) for a in (scale, bias))
            s, b = cache[key]
            setattr(batch, name, x.to(torch.float32).mul_(s).add_(b))
        yield batch
