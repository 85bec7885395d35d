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


def check_arrays(
    header: IdxHeader,
    lengths: np.ndarray,
    pointers: np.ndarray,
    documents: np.ndarray,
    bin_size: int | None,
    idx_path: str,
    bin_path: str,
) -> None:
    """Vectorised consistency checks of the index arrays (and the .bin size when known)."""
    s = header.sequence_count
    if lengths.size and (bad := np.flatnonzero(lengths < 0)).size:
        i = int(bad[0])
        raise IndexFormatError(idx_path, header.lengths_offset + 4 * i, f"sequence {i} has negative length")
    if documents.size:
        if documents[0] != 0:
            raise IndexFormatError(
                idx_path, header.documents_offset, f"document_indices must start at 0, found {documents[0]}"
            )
        if (bad := np.flatnonzero(np.diff(documents) < 0)).size:
            i = int(bad[0]) + 1
            raise IndexFormatError(
                idx_path,
                header.documents_offset + 8 * i,
                f"document_indices not monotonic: entry {i} is {documents[i]} after {documents[i - 1]}",
            )
        if documents[-1] != s:
            raise IndexFormatError(
                idx_path,
                header.documents_offset + 8 * (documents.size - 1),
                f"last document index is {documents[-1]}, expected the sequence count {s}",
            )
    if s == 0:
        return
    if (bad := np.flatnonzero(pointers < 0)).size:
        i = int(bad[0])
        raise IndexFormatError(
            idx_path, header.pointers_offset + 8 * i, f"sequence {i} has a negative pointer"
        )
    itemsize = header.dtype.itemsize
    if itemsize > 1 and (bad := np.flatnonzero(pointers % itemsize)).size:
        i = int(bad[0])
        raise IndexFormatError(
            idx_path, header.pointers_offset + 8 * i, f"sequence {i} pointer is not a multiple of {itemsize}"
        )
    ends = pointers + lengths.astype(np.int64) * itemsize
    if bin_size is not None:
        last = int(np.argmax(ends))
        if int(ends[last]) > bin_size:
            raise IndexFormatError(
                bin_path,
                bin_size,
                f".bin is {bin_size} bytes but sequence {last} ends at byte {int(ends[last])} "
                f"(per {idx_path})",
            )
