"""Split the bytes of one indexed sample (from its first header block to the next sample) into its parts.

Handles ustar prefixes, PAX (`x`) path records and GNU long names (`L`); skips non-regular members, `__meta__`
style names and dot-files exactly as energon's indexer does. Payloads are memoryview slices (no copy).
"""

from __future__ import annotations

import re

from energon_arrow.loader.errors import LoaderError
from energon_arrow.tar.header import BLOCK, REGULAR, cstring, padded, parse_number, parse_pax
from energon_arrow.tar.names import KEY_PART_RE, SKIP_META_RE

_NAME = re.compile(KEY_PART_RE)
_SKIP = re.compile(SKIP_META_RE)


def _pax(payload: memoryview, where: str) -> dict[str, str]:
    try:
        return parse_pax(bytes(payload))
    except ValueError as exc:
        raise LoaderError(f"{where}: corrupt PAX header ({exc})") from None


def _pax_size(value: str, where: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise LoaderError(f"{where}: corrupt PAX size {value!r}") from None


def split_sample(buf: memoryview, where: str) -> tuple[str | None, dict[str, memoryview]]:
    """(key, {part: payload}) of the tar members in `buf`. `where` (shard + offset) prefixes error messages."""
    parts: dict[str, memoryview] = {}
    key = None
    pos, end = 0, len(buf)
    global_pax: dict[str, str] = {}
    long_name, local_pax = None, {}
    while pos + BLOCK <= end:
        at = pos
        header = bytes(buf[pos : pos + BLOCK])
        if header[0] == 0 and not header.strip(b"\0"):
            break
        try:
            size = parse_number(header[124:136])
        except ValueError:
            raise LoaderError(f"{where}+{at}: corrupt tar header (size field {header[124:136]!r})") from None
        flag = header[156]
        data_start = pos + BLOCK
        if flag in REGULAR:  # a PAX size (members of 8 GiB and more) overrides the header's
            pax_size = local_pax.get("size", global_pax.get("size"))
            if pax_size is not None:
                size = _pax_size(pax_size, f"{where}+{at}")
        data_end = data_start + size
        if data_end > end:
            raise LoaderError(
                f"{where}+{at}: tar member runs past the indexed sample end (truncated or stale index)"
            )
        pos = data_start + padded(size)
        if flag in b"xg":
            (local_pax if flag == ord("x") else global_pax).update(
                _pax(buf[data_start:data_end], f"{where}+{at}")
            )
            continue
        if flag == ord("L"):
            long_name = cstring(bytes(buf[data_start:data_end])).decode("utf-8")
            continue
        # like the indexer (tar/scanner.py): the header's name, a global PAX path, a GNU long name, a local PAX path
        name = cstring(header[:100]).decode("utf-8")
        prefix = cstring(header[345:500]) if header[257:262] == b"ustar" else b""
        if prefix:
            name = prefix.decode("utf-8") + "/" + name
        if "path" in global_pax:
            name = global_pax["path"].rstrip("/")
        if long_name is not None:
            name = long_name
        if "path" in local_pax:
            name = local_pax["path"].rstrip("/")
        long_name, local_pax = None, {}
        if flag not in REGULAR or _SKIP.match(name) or name.rsplit("/", 1)[-1].startswith("."):
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
