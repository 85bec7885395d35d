"""Default part decoding by file extension (energon / webdataset conventions), pluggable and zero-copy for npy.

The extension is the text after the last dot of the part name, lower-cased (`seg.txt` -> `txt`). Decoding is
off (`raw=True`) for energon's `decoder = None`: every part is returned as `bytes`.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

TEXT_EXTS = frozenset({"txt", "text", "transcript"})
INT_EXTS = frozenset({"cls", "cls2", "class", "count", "index", "inx", "id"})
JSON_EXTS = frozenset({"json", "jsn"})
IMAGE_EXTS = frozenset(
    {"jpg", "jpeg", "png", "ppm", "pgm", "pbm", "pnm", "webp", "bmp", "tif", "tiff", "gif"}
)
IMAGE_MODES = ("torchrgb", "torch", "numpy", "pil")


def _text(data) -> str:
    return str(data, "utf-8")


def _int(data) -> int:
    return int(str(data, "utf-8").strip())


def _json(data) -> Any:
    return json.loads(str(data, "utf-8"))


def decode_npy(data) -> np.ndarray:
    """A `.npy` payload as an array that views the payload buffer (no copy; read-only if the buffer is)."""
    buf = memoryview(data)
    stream = io.BytesIO(buf[:4096].tobytes() if len(buf) > 4096 else bytes(buf))
    version = np.lib.format.read_magic(stream)
    shape, fortran, dtype = np.lib.format._read_array_header(stream, version)
    count = int(np.prod(shape, dtype=np.int64))
    arr = np.frombuffer(buf, dtype=dtype, count=count, offset=stream.tell())
    return arr.reshape(shape, order="F" if fortran else "C")


def _msgpack(data) -> Any:
    import msgpack

    return msgpack.unpackb(bytes(data), raw=False)


def _image(data, mode: str) -> Any:
    from PIL import Image

    img = Image.open(io.BytesIO(data))
    img.load()
    if mode == "pil":
        return img
    arr = np.asarray(img.convert("RGB"))
    if mode == "numpy":
        return arr
    t = torch.from_numpy(arr.copy()).permute(2, 0, 1)
    return t if mode == "torch" else t.float().div_(255)


def pillow_available() -> bool:
    try:
        import PIL  # noqa: F401
    except ImportError:
        return False
    return True


def msgpack_available() -> bool:
    try:
        import msgpack  # noqa: F401
    except ImportError:
        return False
    return True


class PartDecoder:
    """Decodes one part payload by its extension. `handlers` adds or overrides decoders per extension.

    - txt/text/transcript -> str, cls/index/... -> int, json -> object, npy -> numpy array viewing the payload,
      mp/msgpack -> object (when msgpack is installed), images -> `image_decode` (torchrgb: float CHW in [0, 1];
      torch: uint8 CHW; numpy: uint8 HWC; pil: PIL.Image) when Pillow is installed; anything else -> bytes.
    - `raw=True`: every part stays bytes (energon's `decoder = None`).
    """

    def __init__(
        self,
        raw: bool = False,
        image_decode: str = "torchrgb",
        handlers: dict[str, Callable[[memoryview], Any]] | None = None,
    ):
        if image_decode not in IMAGE_MODES:
            raise ValueError(f"image_decode must be one of {IMAGE_MODES}, got {image_decode!r}")
        self.raw = raw
        self.image_decode = image_decode
        self.handlers = dict(handlers or {})

    def __repr__(self) -> str:
        return f"PartDecoder(raw={self.raw}, image_decode={self.image_decode!r}, handlers={sorted(self.handlers)})"

    def handler(self, part: str) -> Callable | None:
        """The decode function for a part name, or None when the payload stays bytes."""
        if self.raw:
            return None
        ext = part.rsplit(".", 1)[-1].lower()
        if ext in self.handlers:
            return self.handlers[ext]
        if ext in TEXT_EXTS:
            return _text
        if ext in INT_EXTS:
            return _int
        if ext in JSON_EXTS:
            return _json
        if ext == "npy":
            return decode_npy
        if ext in ("mp", "msgpack") and msgpack_available():
            return _msgpack
        if ext in IMAGE_EXTS and pillow_available():
            mode = self.image_decode
            return lambda data: _image(data, mode)
        return None

    def decode(self, part: str, data) -> Any:
        fn = self.handler(part)
        return bytes(data) if fn is None else fn(data)
