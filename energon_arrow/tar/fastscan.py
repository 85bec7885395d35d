"""Vectorised header walk for local shards (memory-mapped as a numpy uint8 array).

Every 512-byte block of a window of the file is parsed as if it were a header (size and type flag, with numpy),
which gives each block a "next header" pointer; the real chain of headers is then followed from block 0 with a
cheap loop over those pointers, and the names, checksums and offsets of the chain's headers are gathered at once.
Windows bound memory and let huge payloads be jumped over without touching their pages.

`scan_members_fast(arr, shard) -> Members | None` handles the plain shards writers produce (USTAR/GNU headers of
types '0', '7', links, devices, directories, fifos; no extension headers, no prefix field, octal sizes). It returns
None whenever anything else shows up (PAX/GNU long names, truncation, bad checksums, ...): the caller then runs the
general walk (`scanner.scan_members`), which either handles it or raises the precise error.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from energon_arrow.tar.header import BLOCK, bad_checksums
from energon_arrow.tar.scanner import Members

_WINDOW_BLOCKS = 1 << 17  # 64 MiB of file per vectorised window
_NO_DATA = np.frombuffer(b"123456", np.uint8)
_REGULAR = np.frombuffer(b"07", np.uint8)
_OCTAL_WEIGHTS = 8 ** np.arange(10, -1, -1, dtype=np.int64)


def scan_members_fast(arr: np.ndarray, shard: str) -> Members | None:
    size = len(arr)
    nb = size // BLOCK
    if nb == 0 or arr[0] == 0x1F:
        return None
    blocks = arr[: nb * BLOCK].reshape(nb, BLOCK)
    chain: list[int] = []
    i = 0
    end_block = -1
    while end_block < 0:
        if i >= nb:
            if i == nb and size == nb * BLOCK and chain:
                end_block = nb  # no EOF marker, data ends exactly at the end of the file
                break
            return None
        w0, w1 = i, min(nb, i + _WINDOW_BLOCKS)
        win = blocks[w0:w1]
        tflag = win[:, 156]
        field = win[:, 124:136]
        digits = field[:, :11] - np.uint8(48)  # the usual "%011o\0" size field; anything else: general walk
        plain = (digits <= 7).all(axis=1) & (field[:, 11] == 0)
        sizes = digits.astype(np.int64) @ _OCTAL_WEIGHTS
        step = np.where(np.isin(tflag, _NO_DATA), 1, 1 + (sizes + (BLOCK - 1)) // BLOCK)
        step[~plain] = 0  # walking onto one of these falls back
        nxt = (np.arange(w0, w1, dtype=np.int64) + step).tolist()
        stop = ((tflag == 0) & (win[:, 0] == 0)).tolist()
        while w0 <= i < w1:
            if stop[i - w0]:
                end_block = i
                break
            chain.append(i)
            j = nxt[i - w0]
            if j == i:
                return None
            i = j
    if not chain or (end_block < nb and blocks[end_block].any()):
        return None
    idx = np.asarray(chain, dtype=np.int64)
    hdr = blocks[idx]
    tflag = hdr[:, 156]
    if not np.all(np.isin(tflag, _REGULAR) | np.isin(tflag, _NO_DATA)) or hdr[:, 345].any():
        return None
    field = hdr[:, 124:136]
    sizes = (field[:, :11] - np.uint8(48)).astype(np.int64) @ _OCTAL_WEIGHTS
    if len(bad_checksums(hdr.tobytes())):
        return None
    data_end = end_block * BLOCK
    if data_end > size:
        return None
    regular = np.isin(tflag, _REGULAR)
    reg = hdr[regular]
    names = reg[:, :100]
    is_nul = names == 0
    lengths = np.where(is_nul.any(axis=1), is_nul.argmax(axis=1), 100).astype(np.int32)
    data = names[np.arange(100)[None, :] < lengths[:, None]]
    offsets = np.zeros(len(reg) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    name_arr = pa.Array.from_buffers(pa.binary(), len(reg), [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    starts = idx[regular] * BLOCK
    return Members(starts, starts + BLOCK, sizes[regular], name_arr, data_end)
