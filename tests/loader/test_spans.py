"""`Spans`: a batch's sample bytes as positions in read buffers (bytes, mmap and memoryview buffers alike)."""

from __future__ import annotations

import mmap

import numpy as np
import pytest

from energon_arrow.loader.spans import Spans


def _buffers(kind: str) -> list:
    raw = [b"0123456789abcdef", b"ABCDEFGHIJ"]
    if kind == "bytes":
        return raw
    if kind == "memoryview":
        return [memoryview(b) for b in raw]
    maps = []
    for b in raw:
        m = mmap.mmap(-1, len(b))
        m.write(b)
        maps.append(m)
    return maps


@pytest.mark.parametrize("kind", ["bytes", "mmap", "memoryview"])
def test_views_and_payloads_cut_the_same_bytes(kind):
    # sample 0: buffer 1 bytes 2..7, sample 1: buffer 0 bytes 4..12, sample 2: buffer 0 bytes 0..3
    spans = Spans(_buffers(kind), np.array([1, 0, 0]), np.array([2, 4, 0]), np.array([6, 9, 4]))
    assert len(spans) == 3
    assert [bytes(v) for v in spans] == [b"CDEFGH", b"456789abc", b"0123"]
    assert all(isinstance(v, memoryview) for v in spans)
    assert bytes(spans[1]) == b"456789abc" and isinstance(spans[1], memoryview)
    parts = spans.payloads(np.array([1, 0, 2]), np.array([3, 2, 2]))  # relative to each sample
    assert parts == [b"DEF", b"45", b"23"]
    assert all(type(p) is bytes for p in parts)


def test_an_empty_batch():
    spans = Spans([], np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert len(spans) == 0 and list(spans) == []
    assert spans.payloads(np.zeros(0, np.int64), np.zeros(0, np.int64)) == []
