"""The compressed images of one batch field, as a DataLoader worker ships them in the `image_device_decode` mode
(the training process decodes them in batches on its device: images/gpu_decode.py).

The payloads lie back to back in one uint8 buffer (a recycled batch slot, see images/slots.py), `offsets`
(n + 1, int64) delimits them, and `components` says per image what the batched JPEG decoder is given: the number
of colour components (1 or 3) of a Huffman-coded baseline, extended or progressive JPEG, read from its frame
header; 0 for anything else (not a JPEG, CMYK, arithmetic or lossless coding, a header that does not parse),
which the training process decodes with Pillow instead.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

# frame headers the batched decoders take: baseline, extended sequential and progressive Huffman coding
_BATCHED_SOF = frozenset((0xC0, 0xC1, 0xC2))
# every other frame header (lossless, arithmetic coding): not batched
_OTHER_SOF = frozenset(range(0xC3, 0xD0)) - {0xC4, 0xC8, 0xCC} - _BATCHED_SOF
_STANDALONE = frozenset((0x01, *range(0xD0, 0xD8)))
GPU_EXTRA = "pip install 'energon-arrow[gpu]'"


def jpeg_components(payload) -> int:
    """The colour components declared by the frame header of a JPEG the batched decoder takes (1 or 3), else 0.
    Reads only the marker segments before the frame header (their lengths are skipped, not scanned)."""
    b = memoryview(payload).cast("B") if not isinstance(payload, bytes) else payload
    n = len(b)
    if n < 4 or b[0] != 0xFF or b[1] != 0xD8:
        return 0
    pos = 2
    while pos + 4 <= n:
        if b[pos] != 0xFF:
            return 0
        marker = b[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in _STANDALONE:
            pos += 2
            continue
        if marker in _BATCHED_SOF:
            if pos + 9 >= n:
                return 0
            comps = b[pos + 9]
            return comps if comps in (1, 3) else 0
        if marker in _OTHER_SOF or marker in (0xD9, 0xDA):  # not batched / no frame header before the scan
            return 0
        pos += 2 + ((b[pos + 2] << 8) | b[pos + 3])
    return 0


class CompressedImages:
    """One image field of a batch, still compressed: `data` (uint8 buffer), `offsets`, `components` (see the
    module docstring) and the part name the payloads come from (for error messages)."""

    __slots__ = ("data", "offsets", "components", "part")

    def __init__(self, data: torch.Tensor, offsets: np.ndarray, components: np.ndarray, part: str):
        if len(offsets) != len(components) + 1:
            raise ValueError(
                f"{len(components)} images need {len(components) + 1} offsets, got {len(offsets)}"
            )
        self.data, self.offsets, self.components, self.part = data, offsets, components, part

    def __len__(self) -> int:
        return len(self.components)

    def __repr__(self) -> str:
        return f"CompressedImages({len(self)} images of part {self.part!r}, {int(self.offsets[-1])} bytes)"

    def __getstate__(self) -> tuple:
        return self.data, self.offsets, self.components, self.part

    def __setstate__(self, state: tuple) -> None:
        self.data, self.offsets, self.components, self.part = state

    def payloads(self) -> list[torch.Tensor]:
        """Each image's bytes: 1-D uint8 views of `data` (what torchvision's decode_jpeg takes)."""
        bounds = self.offsets.tolist()
        return [self.data[a:b] for a, b in zip(bounds[:-1], bounds[1:])]

    def payload_bytes(self, i: int) -> bytes:
        return self.data[int(self.offsets[i]) : int(self.offsets[i + 1])].numpy().tobytes()

    def untyped_storage(self) -> torch.UntypedStorage:
        """The storage of the byte buffer (the batch slot the loader tracks, as for a decoded image field)."""
        return self.data.untyped_storage()


def pack_images(payloads: list, alloc, field: str, part: str) -> CompressedImages:
    """A batch's image payloads copied into one buffer from `alloc` (a SlotAllocator) - no decoding."""
    arrays = [np.frombuffer(p, np.uint8) for p in payloads]
    offsets = np.zeros(len(arrays) + 1, np.int64)
    np.cumsum([a.size for a in arrays], out=offsets[1:])
    data = alloc.tensor((int(offsets[-1]),), torch.uint8, field)
    if arrays:
        np.concatenate(arrays, out=data.numpy())
    components = np.fromiter((jpeg_components(p) for p in payloads), np.int8, len(payloads))
    return CompressedImages(data, offsets, components, part)


def batched_jpeg_decoder() -> Callable:
    """torchvision's `decode_jpeg` (batched; nvjpeg for a CUDA device), or an ImportError naming the extra."""
    try:
        from torchvision.io import decode_jpeg

        torch.ops.image.decode_jpeg  # noqa: B018 - the native image ops must have loaded
    except (ImportError, RuntimeError, OSError, AttributeError) as exc:
        raise ImportError(
            "image_device_decode=True needs torchvision with its native image ops, built for the installed torch "
            f"({GPU_EXTRA}): {type(exc).__name__}: {exc}"
        ) from exc
    return decode_jpeg
