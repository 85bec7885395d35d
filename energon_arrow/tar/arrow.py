"""Building Arrow arrays without `pa.array` (which imports pandas, about a second at start-up, on first use)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

_TYPES = {
    np.dtype(np.int32): pa.int32(),
    np.dtype(np.uint32): pa.uint32(),
    np.dtype(np.int64): pa.int64(),
    np.dtype(np.uint64): pa.uint64(),
    np.dtype(np.float64): pa.float64(),
}

_NUMPY = {t: d for d, t in _TYPES.items()}


def _validity(mask: np.ndarray | None):
    return None if mask is None or mask.all() else pa.py_buffer(np.packbits(mask, bitorder="little"))


def from_numpy(values: np.ndarray, dtype=np.int64, valid: np.ndarray | None = None) -> pa.Array:
    """A zero-copy (when already contiguous and of `dtype`) Arrow array of a 1-d numeric numpy array."""
    arr = np.ascontiguousarray(values, dtype=dtype)
    return pa.Array.from_buffers(_TYPES[arr.dtype], len(arr), [_validity(valid), pa.py_buffer(arr)])


def from_bytes_list(values: list, type_=pa.binary()) -> pa.Array:
    """Arrow binary/string array of a list of bytes or str (None -> null)."""
    valid = np.array([v is not None for v in values], dtype=bool)
    encoded = [
        b"" if v is None else (v.encode("utf-8", "surrogateescape") if isinstance(v, str) else v)
        for v in values
    ]
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum([len(v) for v in encoded], out=offsets[1:])
    large = pa.large_binary() if type_ == pa.binary() else pa.large_string()
    arr = pa.Array.from_buffers(
        large, len(values), [_validity(valid), pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
    )
    return arr.cast(type_)


def bools_to_numpy(values: pa.Array) -> np.ndarray:
    """A boolean Arrow array without nulls as a numpy bool array (`to_numpy` would import pandas)."""
    bits = np.frombuffer(values.buffers()[1], dtype=np.uint8)
    return np.unpackbits(bits, bitorder="little", count=values.offset + len(values))[values.offset :].astype(
        bool
    )


def ints_to_numpy(values) -> np.ndarray:
    """A numeric Arrow array or chunked array without nulls as numpy (`to_numpy` may import pandas)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    dtype = _NUMPY[values.type]
    data = np.frombuffer(values.buffers()[1], dtype=dtype)
    return data[values.offset : values.offset + len(values)]
