"""Pieces of the 512-byte tar header format (USTAR, GNU and PAX), as Python's tarfile reads them.

- `BLOCK`, `ZERO_BLOCK`, type flag sets, `padded(size)`;
- `parse_number(field)`: octal text (NUL/space terminated) or GNU base-256 (first byte 0x80/0xff);
- `parse_pax(payload)`: PAX records `"<len> <key>=<value>\\n"` -> dict of str (path values keep surrogates for
  non-UTF-8 bytes);
- `bad_checksums(blocks)`: vectorised header checksum check over many headers at once (unsigned and signed sums,
  like tarfile), returning the indexes of headers that fail.
"""

from __future__ import annotations

import re

import numpy as np

BLOCK = 512
ZERO_BLOCK = bytes(BLOCK)

# type flags (byte 156) as ints
REGULAR = frozenset(b"0\x007")  # REGTYPE, AREGTYPE, CONTTYPE (GNU sparse 'S' is rejected separately)
NO_DATA = frozenset(b"123456")  # links, devices, directories, fifos: payload not skipped (tarfile semantics)
LONGNAME, LONGLINK, SPARSE = ord("L"), ord("K"), ord("S")
PAX_LOCAL, PAX_GLOBAL, PAX_SOLARIS = ord("x"), ord("g"), ord("X")
AREGTYPE = 0

_PAX_RECORD = re.compile(rb"(\d+) ([^=]+)=")


def padded(size: int) -> int:
    return (size + BLOCK - 1) // BLOCK * BLOCK


def parse_number(field: bytes) -> int:
    """A numeric header field; raises ValueError on garbage."""
    first = field[0]
    if first == 0x80 or first == 0xFF:
        n = int.from_bytes(field[1:], "big")
        return n - 256 ** (len(field) - 1) if first == 0xFF else n
    text = field.split(b"\0", 1)[0].strip()
    return int(text, 8) if text else 0


def cstring(field: bytes) -> bytes:
    return field.split(b"\0", 1)[0]


def parse_pax(payload: bytes) -> dict[str, str]:
    """PAX extended header records, decoded like tarfile (keywords UTF-8; values UTF-8 with fallbacks)."""
    out: dict[str, str] = {}
    pos = 0
    while True:
        m = _PAX_RECORD.match(payload, pos)
        if not m:
            break
        length = int(m.group(1))
        if length == 0:
            raise ValueError("PAX record with length 0")
        value = payload[m.end(2) + 1 : m.start(1) + length - 1]
        key = m.group(2).decode("utf-8", "surrogateescape")
        out[key] = value.decode("utf-8", "surrogateescape")
        pos += length
    return out


def octal_fields(fields: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised tarfile `nti` for (n, w) uint8 octal fields (text up to the first NUL, spaces around the
    digits allowed): (values int64, ok bool). Base-256 fields come back not ok."""
    n, width = fields.shape
    value = np.zeros(n, dtype=np.int64)
    ok = np.ones(n, dtype=bool)
    done = np.zeros(n, dtype=bool)
    digits_seen = np.zeros(n, dtype=bool)
    trailing = np.zeros(n, dtype=bool)  # a space after the digits
    for j in range(width):
        c = fields[:, j]
        done |= c == 0
        active = ~done
        is_digit = active & (c >= 48) & (c <= 55)
        is_space = active & (c == 32)
        ok &= ~(active & ~is_digit & ~is_space) & ~(is_digit & trailing)
        trailing |= is_space & digits_seen
        digits_seen |= is_digit
        value = np.where(is_digit, value * 8 + (c.astype(np.int64) - 48), value)
    return value, ok


# the two usual checksum forms as one little-endian uint64 per field: mask, then the value the masked field has
_SIX_MASK, _SIX_WANT = 0x00FFF8F8F8F8F8F8, 0x0000303030303030  # "%06o\0" + any byte (tarfile writes a space)
_SEVEN_MASK, _SEVEN_WANT = 0xFFF8F8F8F8F8F8F8, 0x0030303030303030  # "%07o\0"
_WEIGHTS7 = 8 ** np.arange(6, -1, -1, dtype=np.int64)


def _checksum_fields(fields: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Stored checksums: the usual "%06o\\0 " and "%07o\\0" forms vectorised, anything else the general way."""
    words = np.ascontiguousarray(fields).view("<u8")[:, 0]
    six = (words & np.uint64(_SIX_MASK)) == np.uint64(_SIX_WANT)
    seven = (words & np.uint64(_SEVEN_MASK)) == np.uint64(_SEVEN_WANT)
    digits = fields[:, :7].astype(np.int64) - 48
    digits[six, 6] = 0  # six digits: shift the value left by one octal digit, then undo it
    values = digits @ _WEIGHTS7
    values[six] >>= 3
    ok = six | seven
    other = np.nonzero(~ok)[0]
    if len(other):
        values[other], ok[other] = octal_fields(fields[other])
    return values, ok


def header_sums(arr: np.ndarray) -> np.ndarray:
    """Unsigned byte sums of (n, 512) uint8 header rows, the checksum field counted as 8 spaces (tarfile)."""
    half = BLOCK // 2  # 256 bytes sum to at most 65280: uint16 accumulators cannot overflow
    sums = arr[:, :half].sum(axis=1, dtype=np.uint16).astype(np.int64)
    sums += arr[:, half:].sum(axis=1, dtype=np.uint16)
    return sums + (8 * 32) - arr[:, 148:156].sum(axis=1, dtype=np.int64)


def bad_checksums(blocks: bytes | np.ndarray) -> np.ndarray:
    """Indexes of the 512-byte headers in `blocks` (bytes, or (n, 512) uint8 rows) whose checksum field matches
    neither tarfile sum."""
    arr = (
        blocks if isinstance(blocks, np.ndarray) else np.frombuffer(blocks, dtype=np.uint8).reshape(-1, BLOCK)
    )
    if arr.shape[0] == 0:
        return np.empty(0, np.int64)
    fields = arr[:, 148:156]
    unsigned = header_sums(arr)
    stored, ok = _checksum_fields(fields)
    bad = []
    for i in np.nonzero(~(ok & (stored == unsigned)))[0]:  # signed sums (old Sun/NeXT tars), base-256: slowly
        signed = int(arr[i].view(np.int8).sum()) - int(fields[i].view(np.int8).sum()) + 8 * 32
        value = int(stored[i]) if ok[i] else None
        if value is None:
            try:
                value = parse_number(bytes(fields[i]))
            except ValueError:
                value = None
        if value not in (int(unsigned[i]), signed):
            bad.append(i)
    return np.asarray(bad, dtype=np.int64)
