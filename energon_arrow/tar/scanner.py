"""The tar header walk: one pass over a shard's headers, payloads skipped, no `tarfile`.

`scan_members(read, size, shard) -> Members` follows Python tarfile's reading rules (which energon 7.4.1 uses):
regular members are types '0', NUL and '7' (NUL with a trailing '/' is a directory); links, devices, directories
and fifos are skipped without skipping a payload; unknown types are skipped with theirs; GNU 'L' (long name) and
'K' (long link) and PAX 'x'/'X' headers apply to the next member and their header blocks count in its start
offset; PAX 'g' (global) headers apply to all later members and do not count; PAX `path` and `size` override the
header; USTAR `prefix` is joined to the name. The walk stops at the first all-zero block or at the end of the
file. Unlike tarfile it refuses what cannot be indexed: empty files, gzip data, bad checksums, truncated headers
or payloads, GNU sparse members; each error names the shard, member and byte offset.

`read(offset, n) -> bytes` returns up to n bytes (fewer only at the end of the file) and is called with
non-decreasing offsets, so a sequential stream can serve it (see `energon_arrow.tar.source`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from energon_arrow.tar.arrow import from_bytes_list
from energon_arrow.tar.errors import TarFormatError
from energon_arrow.tar.header import (
    AREGTYPE,
    BLOCK,
    LONGLINK,
    LONGNAME,
    NO_DATA,
    PAX_GLOBAL,
    PAX_LOCAL,
    PAX_SOLARIS,
    REGULAR,
    SPARSE,
    ZERO_BLOCK,
    bad_checksums,
    cstring,
    padded,
    parse_number,
    parse_pax,
)

_EXTENSION = frozenset((LONGNAME, LONGLINK, PAX_LOCAL, PAX_SOLARIS, PAX_GLOBAL))
_CHECK_BATCH = 4096  # headers per vectorised checksum check


@dataclass
class Members:
    """The regular members of one shard, in archive order (all int64 arrays of equal length)."""

    start: np.ndarray  # first header block of the member (PAX/GNU extension headers included)
    data_offset: np.ndarray  # payload start
    size: np.ndarray  # payload size
    names: pa.Array  # binary: full member names as stored (UTF-8 expected)
    data_end: int  # end of the last member's padded payload (where the EOF blocks start)
    crc: np.ndarray | None = None  # uint32 CRC32C of each payload, when the walk computed it (tar.crc)


def scan_members(read, size: int, shard: str, crc=None) -> Members:
    """`crc(offset, n) -> int`, when given: the CRC32C of the n payload bytes at `offset`, called for each regular
    member right after its header was read (offsets stay non-decreasing); `Members.crc` holds them."""
    starts: list[int] = []
    crcs: list[int] = []
    data_offsets: list[int] = []
    sizes: list[int] = []
    names: list[bytes] = []
    blocks: list[bytes] = []
    block_offsets: list[int] = []
    global_pax: dict[str, str] = {}
    ext_start = -1  # start of pending extension headers (L/K/x) for the next member
    long_name: bytes | None = None
    local_pax: dict[str, str] | None = None
    off = 0

    def fail(reason, member=None, at=None):
        raise TarFormatError(shard, reason, member, off if at is None else at)

    def check_pending():
        if not blocks:
            return
        bad = bad_checksums(b"".join(blocks))
        if len(bad):
            i = int(bad[0])
            at = block_offsets[i]
            if at == 0:
                fail("not a tar file (header checksum mismatch in the first block)", at=0)
            name = cstring(blocks[i][:100]).decode("utf-8", "replace")
            fail("corrupt tar header (checksum mismatch)", name or None, at)
        blocks.clear()
        block_offsets.clear()

    if size == 0:
        fail("empty file (0 bytes), not a tar archive", at=0)
    while True:
        h = read(off, BLOCK)
        if len(h) < BLOCK:
            if not h and off == size:
                if ext_start >= 0:
                    fail("archive ends after an extension header, before its member", at=ext_start)
                break  # no EOF marker: tarfile accepts this, so do we
            if off == 0 and h[:2] == b"\x1f\x8b":
                fail("gzip-compressed data; decompress the shard (energon needs a plain .tar)", at=0)
            if off == 0:
                fail(f"not a tar file (only {len(h)} bytes)", at=0)
            fail(f"truncated tar: {len(h)} of {BLOCK} header bytes before the end of the file")
        if h == ZERO_BLOCK:
            if off == 0:
                fail("empty tar archive (no members)", at=0)
            if ext_start >= 0:
                fail("archive ends after an extension header, before its member", at=ext_start)
            break
        blocks.append(h)
        block_offsets.append(off)
        if len(blocks) >= _CHECK_BATCH or off == 0:
            if off == 0 and h[:2] == b"\x1f\x8b":
                fail("gzip-compressed data; decompress the shard (energon needs a plain .tar)", at=0)
            check_pending()
        t = h[156]
        field = h[124:136]
        try:
            hsize = int(field.split(b"\0", 1)[0] or b"0", 8)
        except ValueError:
            hsize = -1
        if hsize < 0:
            try:
                hsize = parse_number(field)
            except ValueError:
                hsize = -1
        if hsize < 0:
            check_pending()
            fail(
                "corrupt tar header (size field is not a number)", cstring(h[:100]).decode("utf-8", "replace")
            )
        data = off + BLOCK
        if t in REGULAR:
            i = h.find(b"\0", 0, 100)
            name = h[:i] if i >= 0 else h[:100]
            if t == AREGTYPE and name.endswith(b"/"):
                off = data  # old-style directory: no payload skipped
                ext_start, long_name, local_pax = -1, None, None
                continue
            if h[345]:
                name = cstring(h[345:500]) + b"/" + name
            member_size = hsize
            skip = hsize
            if global_pax:
                name, member_size = _apply_pax(global_pax, name, member_size)
            if long_name is not None:
                name = long_name
            if local_pax is not None:
                if "size" in local_pax:
                    skip = member_size = _pax_int(local_pax["size"])
                name, member_size = _apply_pax(local_pax, name, member_size)
            end = data + padded(skip)
            if end > size:
                check_pending()
                fail(
                    f"truncated tar: payload of {skip} bytes at offset {data} runs past the end of the file "
                    f"({size} bytes)",
                    name.decode("utf-8", "replace"),
                    data,
                )
            starts.append(ext_start if ext_start >= 0 else off)
            data_offsets.append(data)
            sizes.append(member_size)
            names.append(name)
            if crc is not None:
                crcs.append(crc(data, member_size))
            off = end
            ext_start, long_name, local_pax = -1, None, None
        elif t in _EXTENSION:
            payload = read(data, padded(hsize))
            if len(payload) < padded(hsize):
                check_pending()
                fail("truncated tar: extension header payload runs past the end of the file", at=data)
            payload = payload[:hsize]
            if t == PAX_GLOBAL:
                try:
                    global_pax.update(parse_pax(payload))
                except ValueError as exc:
                    fail(f"corrupt PAX global header: {exc}")
            else:
                if ext_start < 0:
                    ext_start = off
                if t == LONGNAME:
                    long_name = cstring(payload)
                elif t != LONGLINK:
                    try:
                        records = parse_pax(payload)
                    except ValueError as exc:
                        fail(f"corrupt PAX header: {exc}")
                    local_pax = {**global_pax, **(local_pax or {}), **records}
                    if any(k.startswith("GNU.sparse.") for k in records):
                        fail("GNU sparse members cannot be indexed (their payload is not contiguous)")
            off = data + padded(hsize)
        elif t == SPARSE:
            check_pending()
            fail(
                "GNU sparse members cannot be indexed (their payload is not contiguous)",
                cstring(h[:100]).decode(),
            )
        else:
            # directories, links, devices: no payload; unknown types: payload skipped (tarfile semantics)
            off = data if t in NO_DATA else data + padded(hsize)
            if off > size:
                check_pending()
                fail(
                    "truncated tar: payload runs past the end of the file",
                    cstring(h[:100]).decode("utf-8", "replace"),
                )
            ext_start, long_name, local_pax = -1, None, None
    check_pending()
    return Members(
        np.array(starts, dtype=np.int64),
        np.array(data_offsets, dtype=np.int64),
        np.array(sizes, dtype=np.int64),
        from_bytes_list(names),
        off,
        np.array(crcs, dtype=np.uint32) if crc is not None else None,
    )


def _pax_int(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        return 0


def _apply_pax(pax: dict[str, str], name: bytes, size: int) -> tuple[bytes, int]:
    if "path" in pax:
        name = pax["path"].rstrip("/").encode("utf-8", "surrogateescape")
    if "size" in pax:
        size = _pax_int(pax["size"])
    return name, size
