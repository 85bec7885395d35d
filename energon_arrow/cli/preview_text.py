"""Text rendering of sample values for `energon-arrow preview`: energon's preview layout (images as ASCII art
sized to the terminal, 1-D tensors as their first values, bytes as their first bytes)."""

from __future__ import annotations

import dataclasses
import shutil
import types
import typing
from typing import Any

import numpy as np

RAMP = " .:-=+*#%@"
META = ("__restore_key__", "__subflavors__", "__sources__")
CHAR_ASPECT = 0.5  # a terminal cell is about twice as high as wide


def type_text(hint: Any) -> str:
    """A field's type as energon's preview prints it: `<class 'str'>`, `typing.Optional[int]`."""
    if isinstance(hint, type):
        return str(hint)
    if isinstance(hint, types.UnionType):  # `int | None` -> typing.Optional[int], as energon declares it
        hint = typing.Union[typing.get_args(hint)]  # noqa: UP007
    return repr(hint)


def sample_fields(sample: Any) -> list[tuple[str, str, Any]]:
    """(name, type, value) of the fields energon's preview shows (not the restore key, subflavors, sources)."""
    if dataclasses.is_dataclass(sample):
        try:
            hints = typing.get_type_hints(type(sample))
        except Exception:  # noqa: BLE001 - an unresolvable annotation is shown as written
            hints = {}
        fields = [f for f in dataclasses.fields(sample) if f.name not in META]
        return [(f.name, type_text(hints.get(f.name, f.type)), getattr(sample, f.name)) for f in fields]
    return [(k, str(type(v)), v) for k, v in dict(sample).items() if k not in META]


def _as_array(value: Any) -> np.ndarray | None:
    if isinstance(value, np.ndarray):
        return value
    if type(value).__module__.startswith("torch") and hasattr(value, "detach"):
        return value.detach().cpu().numpy()
    return None


def ascii_image(pixels: np.ndarray, width: int, height: int) -> list[str]:
    """A 2-D array (H, W) as lines of `RAMP` characters fitting `width` x `height` cells, aspect kept."""
    from PIL import Image

    h, w = pixels.shape
    out_w = max(1, min(width, int(height * w / h / CHAR_ASPECT)))
    out_h = max(1, int(round(out_w * h / w * CHAR_ASPECT)))
    small = np.asarray(Image.fromarray(pixels.astype(np.float32), "F").resize((out_w, out_h), Image.BOX))
    lo, hi = float(small.min()), float(small.max())
    levels = (
        ((small - lo) / (hi - lo) * (len(RAMP) - 1) + 0.5).astype(int)
        if hi > lo
        else np.zeros_like(small, int)
    )
    chars = np.array(list(RAMP))
    return ["".join(row) for row in chars[levels]]


def _gray(arr: np.ndarray) -> np.ndarray | None:
    """An image-like array (C, H, W) with C in 1/3/4, or (H, W), as one gray channel; None otherwise."""
    if arr.ndim == 3 and arr.shape[0] in (1, 3, 4) and min(arr.shape[1:]) > 0:
        return arr[: min(3, arr.shape[0])].astype(np.float32).mean(axis=0)
    if arr.ndim == 2 and min(arr.shape) > 0:
        return arr.astype(np.float32)
    return None


def describe(value: Any, indent: str = "", art: bool = True) -> str:
    """One value as preview text; `art=False` leaves images as their shape and dtype."""
    arr = _as_array(value)
    if arr is not None:
        head = f"Tensor(shape={value.shape}, dtype={value.dtype})"
        gray = _gray(arr) if art and arr.dtype.kind in "biuf" else None
        if gray is not None:
            cols, rows = shutil.get_terminal_size((80, 24))
            lines = ascii_image(gray, max(8, cols - len(indent)), max(4, rows - 2))
            return head + ":\n" + indent + f"\n{indent}".join(lines) + "\n"
        if arr.ndim == 1:
            return f"{head}: {arr[:128].tolist()}"
        return head
    if isinstance(value, (str, int, float, bool, type(None))):
        return repr(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value[:128])
        return f"bytes(length={len(value)}, value={data!r})"
    if hasattr(value, "size") and hasattr(value, "mode") and hasattr(value, "getpixel"):  # a PIL image
        return f"Image(size={value.size}, mode={value.mode})"
    if isinstance(value, dict):
        inner = f",\n{indent}  ".join(f"{k!r}: {describe(v, indent + '    ', art)}" for k, v in value.items())
        return "{\n" + indent + "  " + inner + f"\n{indent}}}"
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(v, (str, int, float, bool)) for v in value):
            return repr(value)
        inner = f"\n{indent}  ".join(describe(v, indent + "    ", art) for v in value)
        return "[\n" + indent + "  " + inner + f"\n{indent}]"
    return repr(value)
