"""Vectorised header walks for plain shards held as a numpy uint8 array (memory-mapped or downloaded).

Two ways to find the chain of headers, both without per-member Python:
- magic chain (files up to one window): the blocks carrying the `ustar` magic at byte 257 are the candidate
  headers; when each candidate's size field points exactly at the next candidate and the last one at the end of
  the archive, those candidates are the chain. Only the candidates are parsed, so this costs a few array
  operations per shard however small its members are. A payload block that happens to look like a header, or a
  header without the magic, breaks the exact succession and sends the shard to the next walk.
- window walk: every 512-byte block of a window is parsed as if it were a header (size and type flag), which
  gives each block a "next header" pointer; the chain is then followed from block 0 with a cheap loop over
  those pointers. Windows bound memory and let huge payloads be jumped over without touching their pages.
The names, checksums and offsets of the chain's headers are then gathered at once.

With the compiled module `energon_arrow.tar._headers` (kernels/headers.c), `scan_members_fast` first walks
the chain in C, one header after the other (~0.1 ms instead of ~2.5 ms for a shard of 3,000 small members, the
checksum sums most of it: the bulk of a local prepare's worker time); where that walk declines, the vectorised
walks run as before.

`scan_members_fast(arr) -> Members | None` (and `scan_windows_fast` for a shard that arrives window by
window, which also takes the CRC32C of every payload as its windows pass: `Members.crc`) handles the plain shards writers produce (USTAR/GNU headers of
types '0', '7', links, devices, directories, fifos; no extension headers, no prefix field, octal sizes). It returns
None whenever anything else shows up (PAX/GNU long names, truncation, bad checksums, ...): the caller then runs the
general walk (`scanner.scan_members`), which either handles it or raises the precise error.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from energon_arrow.tar.crc import crc32c, part_crcs
from energon_arrow.tar.header import BLOCK, bad_checksums
from energon_arrow.tar.scanner import Members

try:
    from energon_arrow.tar import _headers as _native
except ImportError:  # built without a C compiler: the vectorised walks only
    _native = None

_WINDOW_BLOCKS = 1 << 17  # 64 MiB of file per vectorised window
_REGULAR, _NO_DATA = 1, 2
_KIND = np.zeros(256, dtype=np.uint8)  # type flag -> 0 (anything else: general walk), _REGULAR or _NO_DATA
_KIND[np.frombuffer(b"07", np.uint8)] = _REGULAR
_KIND[np.frombuffer(b"123456", np.uint8)] = _NO_DATA
_MAGIC = np.frombuffer(b"ustar", np.uint8)
_OCTAL_WEIGHTS = 8 ** np.arange(10, -1, -1, dtype=np.int64)


def _octal_sizes(hdr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Size fields of (n, 512) header rows in the usual "%011o\\0" form: (sizes, plain); other forms not plain."""
    field = hdr[:, 124:136]
    digits = field[:, :11] - np.uint8(48)
    plain = (digits <= 7).all(axis=1) & (field[:, 11] == 0)
    return digits.astype(np.int64) @ _OCTAL_WEIGHTS, plain


def _steps(kind: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Blocks from a header to the next one: the header plus its padded payload (none for links, dirs...)."""
    return np.where(kind == _NO_DATA, 1, 1 + (sizes + (BLOCK - 1)) // BLOCK)


def _candidates(blocks: np.ndarray, start: int):
    """(block numbers, header rows, sizes, next-header block numbers) of the blocks from `start` on that carry
    the `ustar` magic; None unless the first of them is block `start` and every size field is plain."""
    cand = start + np.flatnonzero(blocks[start:, 257] == _MAGIC[0])
    if len(cand) == 0 or cand[0] != start:
        return None
    cand = cand[(blocks[cand, 257:262] == _MAGIC).all(axis=1)]
    if len(cand) == 0 or cand[0] != start:
        return None
    hdr = blocks[cand]
    sizes, plain = _octal_sizes(hdr)
    if not plain.all():
        return None
    return cand, hdr, sizes, cand + _steps(_KIND[hdr[:, 156]], sizes)


def _magic_chain(blocks: np.ndarray):
    """(header block numbers, end block, header rows, sizes) when the `ustar` candidates form the whole chain
    exactly, else None."""
    found = _candidates(blocks, 0)
    if found is None:
        return None
    cand, hdr, sizes, nxt = found
    if not np.array_equal(nxt[:-1], cand[1:]):
        return None
    return cand, int(nxt[-1]), hdr, sizes


def _window_chain(blocks: np.ndarray, size: int):
    """(header block numbers, end block, None, None) by following the pointers of every block, window by
    window; None where the walk meets something it does not handle."""
    nb = len(blocks)
    chain: list[int] = []
    i = 0
    while True:
        if i >= nb:
            if i == nb and size == nb * BLOCK and chain:  # no EOF marker: data ends with the file
                return np.asarray(chain, dtype=np.int64), nb, None, None
            return None
        w0, w1 = i, min(nb, i + _WINDOW_BLOCKS)
        win = blocks[w0:w1]
        tflag = win[:, 156]
        sizes, plain = _octal_sizes(win)
        step = _steps(_KIND[tflag], sizes)
        step[~plain] = 0  # walking onto one of these falls back
        nxt = (np.arange(w0, w1, dtype=np.int64) + step).tolist()
        stop = ((tflag == 0) & (win[:, 0] == 0)).tolist()
        while w0 <= i < w1:
            if stop[i - w0]:
                return np.asarray(chain, dtype=np.int64), i, None, None
            chain.append(i)
            j = nxt[i - w0]
            if j == i:
                return None
            i = j


def _names(names: np.ndarray) -> pa.Array:
    """Binary array of the NUL-terminated (n, 100) name fields."""
    n, width = names.shape
    is_nul = names == 0
    lengths = np.where(is_nul.any(axis=1), is_nul.argmax(axis=1), width)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    # flat position of every kept byte: row start + position within the name
    pos = np.arange(int(offsets[-1]), dtype=np.int64)
    pos += np.repeat(np.arange(0, n * width, width, dtype=np.int64) - offsets[:-1], lengths)
    data = names.reshape(-1)[pos]  # reshape copies a non-contiguous array
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _native_members(arr: np.ndarray) -> Members | None:
    """The compiled walk (module docstring): the same Members for the plain shards it accepts, else None."""
    found = _native.walk(arr)
    if found is None:
        return None
    starts, sizes, name_offsets, names, end_block = found
    start = np.frombuffer(starts, np.int64)
    name_array = pa.Array.from_buffers(
        pa.binary(), len(start), [None, pa.py_buffer(name_offsets), pa.py_buffer(names)]
    )
    return Members(start, start + BLOCK, np.frombuffer(sizes, np.int64), name_array, end_block * BLOCK)


def scan_members_fast(arr: np.ndarray) -> Members | None:
    if _native is not None:
        found = _native_members(arr)
        if found is not None:
            return found
    size = len(arr)
    nb = size // BLOCK
    if nb == 0 or arr[0] == 0x1F:
        return None
    blocks = arr[: nb * BLOCK].reshape(nb, BLOCK)
    # the magic chain reads every block's magic byte: only where a window walk would touch every page too
    found = _magic_chain(blocks) if nb <= _WINDOW_BLOCKS else None
    if found is None:
        found = _window_chain(blocks, size)
    if found is None:
        return None
    idx, end_block, hdr, sizes = found
    if not len(idx) or end_block > nb or (end_block == nb and size != nb * BLOCK):
        return None
    if end_block < nb and blocks[end_block].any():
        return None
    if hdr is None:
        hdr = blocks[idx]
        sizes, plain = _octal_sizes(hdr)
        if not plain.all():
            return None
    part = _regular_members(idx, hdr, sizes)
    return None if part is None else Members(*part, end_block * BLOCK)


def _regular_members(idx: np.ndarray, hdr: np.ndarray, sizes: np.ndarray):
    """(starts, data offsets, sizes, names) of the regular members among chain headers `idx` (block numbers,
    rows `hdr`), or None when a header needs the general walk (other types, prefix field, bad checksum)."""
    kind = _KIND[hdr[:, 156]]
    if not kind.all() or hdr[:, 345].any() or len(bad_checksums(hdr)):
        return None
    regular = np.flatnonzero(kind == _REGULAR)
    starts = idx[regular] * BLOCK
    return starts, starts + BLOCK, sizes[regular], _names(hdr[regular, :100])


def scan_windows_fast(windows, size: int) -> Members | None:
    """`scan_members_fast` for a shard that arrives as consecutive windows `(byte offset, uint8 array)` (offsets
    and lengths multiples of 512 but for the last), e.g. downloaded piece by piece: the magic chain is followed
    across windows (a payload may span several) and each window's headers are reduced to their members at once,
    so memory stays at one window. None whenever the general walk is needed (as scan_members_fast)."""
    total = size // BLOCK
    expected = 0  # block number of the next header
    end_block = None
    parts = []
    crcs = _WindowCrcs()
    for offset, arr in windows:
        b0, nb = offset // BLOCK, len(arr) // BLOCK
        if offset % BLOCK or (offset == 0 and (nb == 0 or arr[0] == 0x1F)):
            return None
        crcs.carry_on(offset, arr)
        if expected >= b0 + nb:
            continue  # inside a payload
        blocks = arr[: nb * BLOCK].reshape(nb, BLOCK)
        local = expected - b0
        found = _candidates(blocks, local)
        if found is None:  # not a header here: the end-of-archive block, or the general walk
            if blocks[local].any() or expected == 0:
                return None
            end_block = expected
            break
        cand, hdr, sizes, nxt = found
        linked = nxt[:-1] == cand[1:]
        k = len(cand) if linked.all() else int(np.argmin(linked)) + 1  # the chain: cand[:k]
        part = _regular_members(cand[:k] + b0, hdr[:k], sizes[:k])
        if part is None:
            return None
        parts.append(part)
        crcs.start(offset, arr, part[1], part[2])
        expected = b0 + int(nxt[k - 1])
        if expected < b0 + nb:  # the chain stops inside this window: only at the end-of-archive block
            if blocks[expected - b0].any():
                return None
            end_block = expected
            break
    else:
        if expected != total or size != total * BLOCK or not parts:  # truncated, or no member: general walk
            return None
        end_block = expected  # no end-of-archive blocks: the data ends with the file
    starts, data, sizes, names = (list(col) for col in zip(*parts))
    return Members(
        np.concatenate(starts),
        np.concatenate(data),
        np.concatenate(sizes),
        pa.concat_arrays(names),
        end_block * BLOCK,
        crcs.values(),
    )


class _WindowCrcs:
    """The CRC32C of each regular member's payload, computed window by window as `scan_windows_fast` walks: a
    payload that starts in a window is taken up to the window's end, and the one that runs on (at most one: the
    headers follow each other) is continued by the next windows (`carry_on`) until it ends."""

    def __init__(self):
        self._done: list[np.ndarray] = []
        self._carry: tuple[np.ndarray, int, int, int] | None = None  # (array, slot, crc so far, payload end)

    def carry_on(self, offset: int, arr: np.ndarray) -> None:
        if self._carry is None:
            return
        out, slot, value, end = self._carry
        take = min(end - offset, len(arr))
        value = crc32c(memoryview(arr)[:take], value)
        if offset + take >= end:
            out[slot] = value
            self._carry = None
        else:
            self._carry = (out, slot, value, end)

    def start(self, offset: int, arr: np.ndarray, data: np.ndarray, sizes: np.ndarray) -> None:
        """Payloads at `data` (file offsets) of `sizes` bytes, whose headers are in window (offset, arr)."""
        win_end = offset + len(arr)
        inside = int(
            np.searchsorted(data + sizes > win_end, True)
        )  # payloads in order: only the last can run on
        out = np.empty(len(data), np.uint32)
        out[:inside] = part_crcs(arr, data[:inside] - offset, sizes[:inside])
        if inside < len(data):  # the last one runs into the next window
            lo = int(data[inside])
            with memoryview(arr) as view:
                self._carry = (
                    out,
                    inside,
                    crc32c(view[min(lo, win_end) - offset :]),
                    lo + int(sizes[inside]),
                )
        self._done.append(out)

    def values(self) -> np.ndarray | None:
        if self._carry is not None:  # the data ended inside a payload: the walk declines such shards
            return None
        return np.concatenate(self._done) if self._done else np.zeros(0, np.uint32)
