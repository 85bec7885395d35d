"""The Megatron-Core `.idx` layout: header, dtype codes and array placement. Pure functions, no I/O.

Layout (little-endian, no padding)::

    0   9      magic b"MMIDIDX\\x00\\x00"
    9   8      version <Q = 1
    17  1      dtype code <B (see DTYPE_CODES)
    18  8      sequence_count S <Q
    26  8      document_count D+1 <Q (length of document_indices)
    34  4*S    sequence_lengths int32
    ..  8*S    sequence_pointers int64 (byte offsets into the .bin)
    ..  8*(D+1) document_indices int64 (doc d = sequences [di[d], di[d+1]))
    ..  1*S    sequence_modes int8, only in multimodal datasets
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
HEADER_SIZE = 34
_HEADER = struct.Struct("<9sQBQQ")

DTYPE_CODES: dict[int, np.dtype] = {
    1: np.dtype(np.uint8),
    2: np.dtype(np.int8),
    3: np.dtype(np.int16),
    4: np.dtype(np.int32),
    5: np.dtype(np.int64),
    6: np.dtype(np.float64),
    7: np.dtype(np.float32),
    8: np.dtype(np.uint16),
}
_CODE_OF = {dt: code for code, dt in DTYPE_CODES.items()}


class IndexFormatError(ValueError):
    """A token dataset file that does not follow the format; the message names the file and byte offset."""

    def __init__(self, path: str, offset: int | None, message: str):
        self.path = path
        self.offset = offset
        where = f" at byte offset {offset}" if offset is not None else ""
        super().__init__(f"{path}{where}: {message}")


def dtype_code(dtype) -> int:
    """The Megatron dtype code of a numpy dtype (ValueError for a dtype the format cannot hold)."""
    dt = np.dtype(dtype)
    try:
        return _CODE_OF[dt]
    except KeyError:
        raise ValueError(
            f"dtype {dt} has no Megatron dtype code (supported: {', '.join(str(d) for d in _CODE_OF)})"
        ) from None


def optimal_dtype(vocab_size: int | None) -> np.dtype:
    """Megatron's token dtype rule: uint16 when the vocabulary has fewer than 65500 entries, else int32."""
    return np.dtype(np.uint16 if vocab_size is not None and vocab_size < 65500 else np.int32)


@dataclass(frozen=True)
class IdxHeader:
    """The fixed header of an .idx file plus the derived positions of its arrays."""

    dtype_code: int
    sequence_count: int
    document_count: int  # length of document_indices (documents + 1)

    @property
    def dtype(self) -> np.dtype:
        return DTYPE_CODES[self.dtype_code]

    @property
    def lengths_offset(self) -> int:
        return HEADER_SIZE

    @property
    def pointers_offset(self) -> int:
        return HEADER_SIZE + 4 * self.sequence_count

    @property
    def documents_offset(self) -> int:
        return HEADER_SIZE + 12 * self.sequence_count

    @property
    def modes_offset(self) -> int:
        return self.documents_offset + 8 * self.document_count

    def size(self, multimodal: bool) -> int:
        """Total .idx size in bytes."""
        return self.modes_offset + (self.sequence_count if multimodal else 0)


def pack_header(dtype, sequence_count: int, document_count: int) -> bytes:
    """The 34 header bytes; `document_count` is the length of document_indices (documents + 1)."""
    return _HEADER.pack(MAGIC, VERSION, dtype_code(dtype), int(sequence_count), int(document_count))


def parse_header(buf: bytes, path: str) -> IdxHeader:
    """Parse and check the 34-byte header; errors name `path` and the offending offset."""
    if len(buf) < HEADER_SIZE:
        raise IndexFormatError(path, len(buf), f"truncated header: {len(buf)} of {HEADER_SIZE} bytes")
    magic, version, code, seqs, docs = _HEADER.unpack_from(buf, 0)
    if magic != MAGIC:
        raise IndexFormatError(path, 0, f"bad magic {magic!r}, expected {MAGIC!r}: not a Megatron .idx file")
    if version != VERSION:
        raise IndexFormatError(path, 9, f"unsupported version {version} (only version {VERSION} exists)")
    if code not in DTYPE_CODES:
        raise IndexFormatError(path, 17, f"unknown dtype code {code} (known: 1-8)")
    if docs < 1:
        raise IndexFormatError(path, 26, "document count is 0; document_indices always holds a leading 0")
    return IdxHeader(code, seqs, docs)


def detect_multimodal(header: IdxHeader, file_size: int, multimodal: bool | None, path: str) -> bool:
    """Decide whether sequence modes are present (the header has no flag: the size tells) and check the
    file is exactly as long as its header says. `multimodal=None` auto-detects."""
    plain = header.size(False)
    with_modes = header.size(True)
    if file_size < plain or (multimodal and file_size < with_modes):
        need = with_modes if multimodal else plain
        raise IndexFormatError(
            path, file_size, f"truncated .idx: {file_size} bytes, the header requires {need}"
        )
    if multimodal is None:
        multimodal = header.sequence_count > 0 and file_size == with_modes
    expected = with_modes if multimodal else plain
    if file_size != expected:
        raise IndexFormatError(
            path,
            expected,
            f"{file_size - expected} unexpected trailing bytes after the index arrays "
            f"(file is {file_size} bytes, expected {expected}"
            + ("" if multimodal else f", or {with_modes} with sequence modes")
            + ")",
        )
    return multimodal


def sequence_pointers(lengths: np.ndarray, itemsize: int, start: int = 0) -> np.ndarray:
    """Byte offset of each sequence in the .bin: the exclusive cumulative sum of length*itemsize."""
    lengths = np.asarray(lengths, dtype=np.int64)
    out = np.empty(lengths.size, np.int64)
    if lengths.size:
        out[0] = start
        np.cumsum(lengths[:-1] * itemsize, out=out[1:])
        out[1:] += start
    return out


CHECK_WINDOW = 1 << 16  # entries per validation window (bounds the reader's buffers and the temporaries)

WindowReader = Callable[[int, np.dtype, int, int], np.ndarray]
"""`read(offset, dtype, first, count)`: entries [first, first + count) of the array stored at byte `offset`."""


def _windows(read: WindowReader, offset: int, dtype, count: int, window: int):
    dtype = np.dtype(dtype)
    for first in range(0, count, window):
        yield first, read(offset, dtype, first, min(window, count - first))


def check_arrays(
    header: IdxHeader,
    read: WindowReader,
    bin_size: int | None,
    idx_path: str,
    bin_path: str,
    window: int = CHECK_WINDOW,
) -> None:
    """Vectorised consistency checks of the index arrays (and the .bin size when known), one window at a time:
    `read` hands out windows of the stored arrays, so a caller that maps each window on its own keeps neither
    the whole index resident nor any full-size temporary. The offending entry is named by index and offset."""
    s, h = header.sequence_count, header
    previous = None  # the last document index of the previous window
    for first, docs in _windows(read, h.documents_offset, np.int64, h.document_count, window):
        if first == 0 and docs[0] != 0:
            raise IndexFormatError(
                idx_path, h.documents_offset, f"document_indices must start at 0, found {docs[0]}"
            )
        if (previous is not None and docs[0] < previous) or np.any(docs[1:] < docs[:-1]):
            j = 0 if previous is not None and docs[0] < previous else int(np.argmax(docs[1:] < docs[:-1])) + 1
            i = first + j
            raise IndexFormatError(
                idx_path,
                h.documents_offset + 8 * i,
                f"document_indices not monotonic: entry {i} is {docs[j]} after "
                f"{docs[j - 1] if j else previous}",
            )
        previous = docs[-1]
    if previous is not None and previous != s:
        raise IndexFormatError(
            idx_path,
            h.documents_offset + 8 * (h.document_count - 1),
            f"last document index is {previous}, expected the sequence count {s}",
        )
    itemsize = h.dtype.itemsize  # a power of two: aligned pointers have no low bits set
    longest_end, longest = -1, -1
    for first, pointers in _windows(read, h.pointers_offset, np.int64, s, window):
        lengths = read(h.lengths_offset, np.dtype(np.int32), first, pointers.size)
        if lengths.min() < 0:
            i = first + int(np.argmax(lengths < 0))
            raise IndexFormatError(idx_path, h.lengths_offset + 4 * i, f"sequence {i} has negative length")
        # one OR over the window finds both a negative pointer (sign bit) and a misaligned one (low bits)
        if int(np.bitwise_or.reduce(pointers)) & (itemsize - 1 | 1 << 63):
            i = first + int(np.argmax((pointers < 0) | (pointers % itemsize != 0)))
            problem = (
                "has a negative pointer"
                if pointers[i - first] < 0
                else f"pointer is not a multiple of {itemsize}"
            )
            raise IndexFormatError(idx_path, h.pointers_offset + 8 * i, f"sequence {i} {problem}")
        ends = lengths.astype(np.int64)
        ends *= itemsize
        ends += pointers
        last = int(np.argmax(ends))
        if int(ends[last]) > longest_end:
            longest_end, longest = int(ends[last]), first + last
    if bin_size is not None and longest_end > bin_size:
        raise IndexFormatError(
            bin_path,
            bin_size,
            f".bin is {bin_size} bytes but sequence {longest} ends at byte {longest_end} (per {idx_path})",
        )
