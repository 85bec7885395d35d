"""Part decoders by extension, zero-copy npy, images through Pillow, raw mode."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch

from energon_arrow.samples.decoders import PartDecoder, decode_npy


def test_text_json_int_and_unknown():
    d = PartDecoder()
    assert d.decode("seg.txt", b"hi") == "hi"
    assert d.decode("json", json.dumps({"a": [1]}).encode()) == {"a": [1]}
    assert d.decode("cls", b" 7\n") == 7
    assert d.decode("bin", memoryview(b"\x00\x01")) == b"\x00\x01"
    assert d.decode("TXT", b"x") == "x"  # extension case-insensitive


def test_raw_mode_keeps_bytes():
    d = PartDecoder(raw=True)
    assert d.decode("json", b"{}") == b"{}" and d.handler("txt") is None


def test_npy_is_a_view_of_the_payload():
    buf = io.BytesIO()
    np.save(buf, np.arange(12, dtype=np.int32).reshape(3, 4))
    payload = bytearray(buf.getvalue())
    arr = decode_npy(memoryview(payload))
    assert arr.shape == (3, 4) and arr[2, 3] == 11
    payload[-4:] = np.int32(99).tobytes()
    assert arr[2, 3] == 99  # shares memory with the payload
    assert torch.from_numpy(arr).shape == (3, 4)


def test_image_modes():
    pil = pytest.importorskip("PIL.Image")
    buf = io.BytesIO()
    pil.new("RGB", (4, 3), (255, 0, 0)).save(buf, format="PNG")
    t = PartDecoder().decode("png", buf.getvalue())
    assert t.shape == (3, 3, 4) and t.dtype == torch.float32 and float(t[0, 0, 0]) == 1.0
    assert PartDecoder(image_decode="numpy").decode("png", buf.getvalue()).shape == (3, 4, 3)
    assert PartDecoder(image_decode="torch").decode("png", buf.getvalue()).dtype == torch.uint8
    with pytest.raises(ValueError, match="image_decode"):
        PartDecoder(image_decode="cv2")


def test_custom_handlers_override():
    d = PartDecoder(handlers={"txt": lambda data: len(data)})
    assert d.decode("txt", b"abc") == 3
