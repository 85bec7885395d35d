"""Splitting an indexed sample's bytes into parts: long names, skipped members, truncation."""

from __future__ import annotations

import io
import tarfile

import pytest

from energon_arrow.loader.errors import LoaderError
from energon_arrow.loader.members import split_sample


def _tar(members, fmt=tarfile.PAX_FORMAT) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_parts_of_one_sample_are_views():
    data = _tar([("a/k1.jpg", b"xyz"), ("a/k1.seg.txt", b"hello")])
    key, parts = split_sample(memoryview(data), "t.tar")
    assert key == "a/k1"
    assert {p: bytes(v) for p, v in parts.items()} == {"jpg": b"xyz", "seg.txt": b"hello"}
    assert isinstance(parts["jpg"], memoryview)


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT])
def test_long_names(fmt):
    long_dir = "d" * 120
    data = _tar([(f"{long_dir}/key.json", b"{}"), (f"{long_dir}/key.txt", b"t")], fmt)
    key, parts = split_sample(memoryview(data), "t.tar")
    assert key == f"{long_dir}/key" and sorted(parts) == ["json", "txt"]


def test_skipped_members_and_next_sample_stop():
    data = _tar(
        [("dir", None), ("__meta__/x.txt", b"m"), ("k.txt", b"1"), ("k/.hidden.txt", b"h"), ("n.txt", b"2")]
    )
    key, parts = split_sample(memoryview(data), "t.tar")
    assert key == "k" and {p: bytes(v) for p, v in parts.items()} == {"txt": b"1"}


def test_truncated_sample_names_the_place():
    data = _tar([("k.bin", b"x" * 2000)])
    with pytest.raises(LoaderError, match=r"t.tar@100\+0: tar member runs past"):
        split_sample(memoryview(data)[:1024], "t.tar@100")


def _pax_member(name: str, data: bytes, pax: dict) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.pax_headers = pax
    block = info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
    return block + data + bytes(-len(data) % 512)


def test_a_pax_size_overrides_the_header_size():
    member = bytearray(_pax_member("k.txt", b"hello", {"size": "5"}))
    ustar = len(member) - 1024  # the member's own header (after the PAX header and its record block)
    member[ustar + 124 : ustar + 136] = b"00000000000\0"  # the header claims 0 bytes
    key, parts = split_sample(memoryview(bytes(member) + _tar([("n.txt", b"2")])), "t.tar")
    assert key == "k" and bytes(parts["txt"]) == b"hello"


def test_a_corrupt_pax_record_names_the_place():
    member = bytearray(_pax_member("k.txt", b"hello", {"comment": "abc"}))
    member[512:520] = b"0 a=b\n\0\0"  # a record of length 0
    with pytest.raises(LoaderError, match=r"t.tar@7\+0: corrupt PAX header"):
        split_sample(memoryview(bytes(member)), "t.tar@7")
