"""Part decoding against energon 7.4.1's SampleDecoder on the same bytes: every image mode, basic formats."""

from __future__ import annotations

import gzip
import io
import json
import pickle

import numpy as np
import pytest
import torch

import energon_arrow as ea
from energon_arrow.images.decode import IMAGE_SPECS
from energon_arrow.samples import PartDecoder, SampleDecoder
from energon_arrow.samples.payloads import decode_npy

energon = pytest.importorskip("megatron.energon")
Image = pytest.importorskip("PIL.Image")


def _image_bytes(mode: str, fmt: str) -> bytes:
    rng = np.random.default_rng(7)
    if mode == "P":
        img = Image.fromarray(rng.integers(0, 255, (5, 6, 3), dtype=np.uint8)).convert("P")
    else:
        channels = {"L": (), "RGB": (3,), "RGBA": (4,)}[mode]
        img = Image.fromarray(rng.integers(0, 255, (5, 6, *channels), dtype=np.uint8), mode)
    buf = io.BytesIO()
    img.save(buf, format=fmt)
    return buf.getvalue()


IMAGES = [("L", "PNG"), ("RGB", "PNG"), ("RGBA", "PNG"), ("P", "PNG"), ("RGB", "JPEG")]


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, Image.Image):
        return a.mode == b.mode and a.size == b.size and a.tobytes() == b.tobytes()
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def test_image_modes_are_energons():
    from megatron.energon.flavors.webdataset.sample_decoder import ImageDecoderType

    assert sorted(IMAGE_SPECS) == sorted(ImageDecoderType.__args__)


@pytest.mark.parametrize("mode", sorted(IMAGE_SPECS))
def test_images_identical_to_energon(mode):
    ours, ref = SampleDecoder(image_decode=mode), energon.SampleDecoder(image_decode=mode)
    for img_mode, fmt in IMAGES:
        data = _image_bytes(img_mode, fmt)
        for name in ("k.png", "k.JPG", "dir/k.seg.jpeg"):
            assert _same(ours.decode(name, data), ref.decode(name, data)), (mode, img_mode, fmt, name)


def _tenbin(arrays) -> bytes:
    from webdataset import tenbin

    return bytes(tenbin.encode_buffer(arrays))


def _payloads() -> dict[str, bytes]:
    npy, npz = io.BytesIO(), io.BytesIO()
    np.save(npy, np.arange(12, dtype=np.int32).reshape(3, 4))
    np.savez(npz, a=np.ones(2), b=np.arange(3))
    return {
        "k.txt": "héllo".encode(),
        "k.seg.text": b"seg",
        "k.transcript": b"tr",
        "k.TXT": b"upper-case text stays bytes",
        "k.cls": b" 7\n",
        "k.id": b"42",
        "k.index": b"3",
        "k.json": json.dumps({"a": [1, 2]}).encode(),
        "k.jsn": b"[1]",
        "k.npy": npy.getvalue(),
        "k.npz": npz.getvalue(),
        "k.pkl": pickle.dumps({"x": (1, 2)}),
        "k.ten": _tenbin([np.arange(6, dtype=np.float32).reshape(2, 3), np.array([1, 2], dtype=np.int64)]),
        "k.txt.gz": gzip.compress(b"zipped"),
        "k.gz": gzip.compress(b"plain"),
        "k.bin": b"\x00\x01",
        "k.class": b"5",
    }


def test_basic_formats_identical_to_energon():
    ours, ref = SampleDecoder(), energon.SampleDecoder()
    for name, data in _payloads().items():
        assert _same(ours.decode(name, data), ref.decode(name, data)), name


def test_sample_dict_call_identical_to_energon():
    sample = {
        "__key__": "k",
        "__url__": b"shard.tar",
        "txt": b"t",
        "json": b"{}",
        "png": _image_bytes("RGB", "PNG"),
    }
    assert _same(SampleDecoder()(dict(sample)), energon.SampleDecoder()(dict(sample)))
    with pytest.raises(ea.loader.errors.DecodeError, match="'json'"):
        SampleDecoder()({"__key__": "k", "json": b"{"})


def test_guess_content_identical_to_energon():
    png = _image_bytes("RGB", "PNG")
    ours, ref = SampleDecoder(guess_content=True), energon.SampleDecoder(guess_content=True)
    for name, data in (("k.bin", png), ("k.txt", b"plain"), ("k.jpg", png)):
        assert _same(ours.decode(name, data), ref.decode(name, data)), name
    assert isinstance(ours.decode_part("bin", png), torch.Tensor)


def test_av_without_pyav_is_a_clear_error(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_av(name, *args, **kwargs):
        if name == "av":
            raise ImportError("no av")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_av)
    for mode in ("AVDecoder", "torch", "pyav"):
        with pytest.raises(ImportError, match="PyAV"):
            SampleDecoder(av_decode=mode).decode("k.mp4", b"\x00" * 16)
    with pytest.raises(ValueError, match="av_decode"):
        SampleDecoder(av_decode="frames")


def test_missing_optional_package_is_a_clear_error():
    try:
        import msgpack  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="msgpack"):
            SampleDecoder().decode("k.mp", b"\x90")
    else:
        assert SampleDecoder().decode("k.mp", b"\x90") == []


def test_part_names_raw_mode_and_handlers():
    d = PartDecoder()
    assert d.decode_part("seg.txt", b"hi") == "hi" and d.decode_part("cls", memoryview(b"3")) == 3
    assert d.decode("no_extension", b"{}") == b"{}"  # energon: a name without a part decodes nothing
    raw = PartDecoder(raw=True)
    assert raw.decode_part("json", b"{}") == b"{}" and raw.handler("txt") is None
    custom = PartDecoder(handlers={"TXT": len})
    assert custom.decode_part("txt", b"abc") == 3 and custom.decode_part("seg.Txt", b"ab") == 2
    with pytest.raises(ValueError, match="image_decode"):
        SampleDecoder(image_decode="cv2")
    assert SampleDecoder(image_decode="pil").config() == energon.SampleDecoder(image_decode="pil").config()
    with pytest.raises(TypeError):
        SampleDecoder("pil")  # keyword-only, as energon's


def test_npy_is_a_view_of_the_payload():
    buf = io.BytesIO()
    np.save(buf, np.arange(12, dtype=np.int32).reshape(3, 4))
    payload = bytearray(buf.getvalue())
    arr = decode_npy(memoryview(payload))
    assert arr.shape == (3, 4) and arr[2, 3] == 11
    payload[-4:] = np.int32(99).tobytes()
    assert arr[2, 3] == 99  # shares memory with the payload
