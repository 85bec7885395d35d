"""adapters.etag_md5: bytes checked against single-PUT and multipart ETags, fed in pieces of any size."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from energon_arrow.adapters.etag_md5 import MIB, EtagMd5


def _multipart_etag(data: bytes, part: int) -> str:
    parts = [hashlib.md5(data[i : i + part]).digest() for i in range(0, len(data), part)]
    return f'"{hashlib.md5(b"".join(parts)).hexdigest()}-{len(parts)}"'


DATA = np.random.default_rng(1).integers(0, 256, 17 * MIB + 12345, dtype=np.uint8).tobytes()


def _fed(etag: str, data: bytes, piece: int) -> EtagMd5:
    check = EtagMd5(etag, len(DATA))
    for i in range(0, len(data), piece):
        check.update(data[i : i + piece])
    return check


@pytest.mark.parametrize("piece", [1 << 20, 3 * MIB + 7, 16 * MIB])
@pytest.mark.parametrize(
    "etag",
    [f'"{hashlib.md5(DATA).hexdigest()}"', _multipart_etag(DATA, 5 * MIB), _multipart_etag(DATA, 8 * MIB)],
)
def test_the_right_bytes_match_and_damaged_ones_do_not(etag, piece):
    assert _fed(etag, DATA, piece).matches()
    damaged = bytearray(DATA)
    damaged[len(DATA) // 2] ^= 1
    check = _fed(etag, bytes(damaged), piece)
    assert check.checkable and not check.matches() and check.got() != etag.strip('"')
    assert not _fed(etag, DATA[:-1], piece).matches()  # fewer bytes than the object's size


def test_etags_that_cannot_be_checked():
    assert not EtagMd5(None, 10).checkable
    assert not EtagMd5("not-an-md5", 10).checkable
    assert not EtagMd5(
        "0" * 32 + "-2", 1000
    ).checkable  # 2 parts of 1000 bytes: no usual part size gives that


def test_a_multipart_upload_of_an_unusual_part_size_is_told_by_two_agreeing_reads():
    etag = _multipart_etag(DATA, 7 * MIB)  # 3 parts, as 8 MiB parts would give: tried, never matches
    first, second = _fed(etag, DATA, MIB), _fed(etag, DATA, 5 * MIB)
    assert first.checkable and not first.matches() and not first.stable(None)
    assert second.stable(first.got())
    damaged = bytearray(DATA)
    damaged[7] ^= 1
    assert not _fed(etag, bytes(damaged), MIB).stable(first.got())
