"""Split the bytes of one indexed sample (from its first header block to the next sample) into its parts.

Handles ustar prefixes, PAX (`x`) path records and GNU long names (`L`); skips non-regular members, `__meta__`
style names and dot-files exactly as energon's indexer does. Payloads are memoryview slices (no copy).
"""

from __future__ import annotations

import re

from energon_arrow.loader.errors import LoaderError

_NAME = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
_SKIP = re.compile(r"^__[^/]*__($|/)")
_REGULAR = (b"0", b"\0", b"7")


def _octal(field: bytes, where: str) -> int:
    if field[:1] and field[0] & 0x80:  # GNU base-256
        return int.from_bytes(field[1:], "big")
    text = field.split(b"\0", 1)[0].strip()
    try:
        return int(text, 8) if text else 0
    except ValueError:
        raise LoaderError(f"{where}: corrupt tar header (size field {field!r})") from None


def _pax_path(payload: memoryview) -> str | None:
    data = bytes(payload)
    pos = 0
    path = None
    while pos < len(data):
        space = data.index(b" ", pos)
        length = int(data[pos:space])
        key, _, value = data[space + 1 : pos + length - 1].partition(b"=")
        if key == b"path":
            path = value.decode("utf-8")
        pos += length
    return path


def split_sample(buf: memoryview, where: str) -> tuple[str | None, dict[str, memoryview]]:
    """(key, {part: payload}) of the tar members in `buf`. `where` (shard + offset) prefixes error messages."""
    parts: dict[str, memoryview] = {}
    key = None
    pos, end = 0, len(buf)
    long_name = None
    while pos + 512 <= end:
        header = bytes(buf[pos : pos + 512])
        if header[0] == 0 and not header.strip(b"\0"):
            break
        size = _octal(header[124:136], f"{where}+{pos}")
        flag = header[156:157]
        data_start = pos + 512
        data_end = data_start + size
        if data_end > end:
            raise LoaderError(
                f"{where}+{pos}: tar member runs past the indexed sample end (truncated or stale index)"
            )
        pos = data_start + ((size + 511) & ~511)
        if flag == b"x":
            long_name = _pax_path(buf[data_start:data_end]) or long_name
            continue
        if flag == b"L":
            long_name = bytes(buf[data_start:data_end]).split(b"\0", 1)[0].decode("utf-8")
            continue
        if long_name is not None:
            name, long_name = long_name, None
        else:
            name = header[:100].split(b"\0", 1)[0].decode("utf-8")
            prefix = header[345:500].split(b"\0", 1)[0] if header[257:262] == b"ustar" else b""
            if prefix:
                name = prefix.decode("utf-8") + "/" + name
        if flag not in _REGULAR or _SKIP.match(name) or name.rsplit("/", 1)[-1].startswith("."):
            continue
        m = _NAME.match(name)
        if m is None:
            continue
        if key is None:
            key = m.group(1)
        elif m.group(1) != key:
            break
        parts[m.group(2)] = buf[data_start:data_end]
    return key, parts
