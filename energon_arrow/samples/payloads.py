"""Decoders of one part payload by format (the webdataset conventions energon decodes by default).

Every function takes a bytes-like payload (bytes or memoryview) and returns the decoded value. `BASIC_DECODERS`
maps a part's extension (case-sensitive, as energon matches it) to its decoder.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import struct
from typing import Any

import numpy as np


def decode_text(data) -> str:
    return str(data, "utf-8")


def decode_int(data) -> int:
    return int(bytes(data))


def decode_json(data) -> Any:
    return json.loads(bytes(data))


def decode_npy(data) -> np.ndarray:
    """A `.npy` payload as an array that views the payload buffer (no copy; read-only if the buffer is)."""
    buf = memoryview(data)
    stream = io.BytesIO(buf[:4096].tobytes() if len(buf) > 4096 else bytes(buf))
    version = np.lib.format.read_magic(stream)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
    else:
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
    count = int(np.prod(shape, dtype=np.int64))
    arr = np.frombuffer(buf, dtype=dtype, count=count, offset=stream.tell())
    return arr.reshape(shape, order="F" if fortran else "C")


def decode_npz(data) -> dict[str, np.ndarray]:
    return dict(np.load(io.BytesIO(bytes(data))))


def _secure() -> bool:
    """webdataset's WDS_SECURE=1: refuse pickle and torch.load payloads (energon honours it too)."""
    return bool(int(os.environ.get("WDS_SECURE", "0")))


def decode_pickle(data) -> Any:
    if _secure():
        raise ValueError("unpickling is refused because WDS_SECURE is set")
    return pickle.loads(data)


def decode_torch(data) -> Any:
    import torch

    if _secure():
        raise ValueError("torch.load is refused because WDS_SECURE is set")
    weights_only = os.environ.get("WDS_PYTORCH_WEIGHTS_ONLY", "0") == "1"
    return torch.load(io.BytesIO(bytes(data)), weights_only=weights_only, map_location="cpu")


def decode_msgpack(data) -> Any:
    try:
        import msgpack
    except ImportError:
        raise ImportError("decoding a msgpack part needs the msgpack package (pip install msgpack)") from None
    return msgpack.unpackb(bytes(data))


def decode_cbor(data) -> Any:
    try:
        import cbor
    except ImportError:
        raise ImportError("decoding a cbor part needs the cbor package (pip install cbor)") from None
    return cbor.loads(bytes(data))


_TENBIN_MAGIC = b"~TenBin~"


def decode_tenbin(data) -> list[np.ndarray]:
    """A tenbin payload (webdataset's `.ten`): a list of arrays.

    Layout: chunks of (8-byte magic, int64 length, data padded to 64 bytes); each array is a header chunk
    (int64 words: dtype code, info, rank, dims...) followed by its data chunk.
    """
    buf = memoryview(bytes(data))
    chunks, offset = [], 0
    while offset < len(buf):
        if buf[offset : offset + 8] != _TENBIN_MAGIC:
            raise ValueError(f"tenbin: bad magic at byte {offset}")
        (size,) = struct.unpack("@q", buf[offset + 8 : offset + 16])
        chunks.append(buf[offset + 16 : offset + 16 + size])
        offset += 16 + (size + 63) // 64 * 64
    if len(chunks) % 2:
        raise ValueError("tenbin: a header chunk without its data chunk")
    arrays = []
    for header, payload in zip(chunks[::2], chunks[1::2]):
        words = np.frombuffer(header, dtype="i8")
        dtype = np.dtype(struct.pack("@q", int(words[0])).rstrip(b"\0").decode("ascii"))
        shape = tuple(int(d) for d in words[3 : 3 + int(words[2])])
        arrays.append(np.frombuffer(payload, dtype=dtype, count=int(np.prod(shape))).reshape(shape))
    return arrays


BASIC_DECODERS = {
    "txt": decode_text,
    "text": decode_text,
    "transcript": decode_text,
    "cls": decode_int,
    "cls2": decode_int,
    "index": decode_int,
    "inx": decode_int,
    "id": decode_int,
    "json": decode_json,
    "jsn": decode_json,
    "pkl": decode_pickle,
    "pickle": decode_pickle,
    "pyd": decode_pickle,
    "pth": decode_torch,
    "ten": decode_tenbin,
    "tb": decode_tenbin,
    "mp": decode_msgpack,
    "msg": decode_msgpack,
    "npy": decode_npy,
    "npz": decode_npz,
    "cbor": decode_cbor,
}
