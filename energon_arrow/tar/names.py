"""Member name -> (sample key, part name), energon 7.4.1's rules, vectorised over a binary Arrow array.

energon keeps a regular member when its name does not match `^__[^/]*__($|/)` and matches
`^((?:.*/|)[^.]+)[.]([^/]*)$`; group 1 is the key, group 2 the part. For the usual name (basename not starting
with a dot, not starting with `__`) this is: key = name up to the first dot after the last slash, part = the rest,
computed here on the UTF-8 bytes with numpy ('/' and '.' never occur inside multi-byte characters). Any other name
in a shard sends the whole shard through the exact regexes in Python.

`split_names(names: pa.BinaryArray) -> (keep: np.ndarray[bool], keys: pa.StringArray, parts: pa.StringArray)`
with keys/parts for the kept members only. Raises UnicodeDecodeError(index) via `NameDecodeError` on bad UTF-8.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa

from energon_arrow.tar.arrow import from_bytes_list

KEY_PART_RE = r"^((?:.*/|)[^.]+)[.]([^/]*)$"
SKIP_META_RE = r"__[^/]*__($|/)"  # re.match: anchored at the start
_key_part = re.compile(KEY_PART_RE)
_skip_meta = re.compile(SKIP_META_RE)


class NameDecodeError(ValueError):
    def __init__(self, index: int):
        super().__init__(f"member name {index} is not valid UTF-8")
        self.index = index


def _check_utf8(names: pa.Array) -> None:
    try:
        names.cast(pa.string())
    except pa.ArrowInvalid:
        for i, raw in enumerate(names.to_pylist()):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                raise NameDecodeError(i) from None
        raise


def _buffers(names: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    names = names.cast(pa.large_binary()) if names.type != pa.large_binary() else names
    _, off_buf, data_buf = names.buffers()
    offsets = np.frombuffer(off_buf, dtype=np.int64)[names.offset : names.offset + len(names) + 1]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.empty(0, np.uint8)
    return offsets, data


def _string_array(data: np.ndarray, lengths: np.ndarray) -> pa.Array:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return pa.Array.from_buffers(
        pa.large_string(),
        len(lengths),
        [None, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(data))],
    ).cast(pa.string())


def _last_per_segment(seg: np.ndarray, values: np.ndarray, n: int, first: bool) -> np.ndarray:
    out = np.full(n, -1, dtype=np.int64)
    if len(seg):
        edge = np.ones(len(seg), dtype=bool)
        if first:
            edge[1:] = seg[1:] != seg[:-1]
        else:
            edge[:-1] = seg[1:] != seg[:-1]
        out[seg[edge]] = values[edge]
    return out


def split_names(names: pa.Array) -> tuple[np.ndarray, pa.Array, pa.Array]:
    _check_utf8(names)
    n = len(names)
    offsets, data = _buffers(names)
    base = int(offsets[0])
    data = data[base : int(offsets[-1])]
    offsets = offsets - base
    lengths = np.diff(offsets)
    seg = np.repeat(np.arange(n, dtype=np.int64), lengths)
    pos = np.arange(len(data), dtype=np.int64) - offsets[:-1][seg]
    slash = np.nonzero(data == 47)[0]
    last_slash = _last_per_segment(seg[slash], pos[slash], n, first=False)
    dots = np.nonzero(data == 46)[0]
    after = pos[dots] > last_slash[seg[dots]]
    dots = dots[after]
    first_dot = _last_per_segment(seg[dots], pos[dots], n, first=True)
    starts_meta = (lengths >= 2) & (data[np.minimum(offsets[:-1], max(len(data) - 1, 0))] == 95)
    if len(data):
        starts_meta &= data[np.minimum(offsets[:-1] + 1, len(data) - 1)] == 95
    dot_at_base = (first_dot >= 0) & (first_dot == last_slash + 1)
    if starts_meta.any() or dot_at_base.any():
        return _split_names_python(names)
    keep = first_dot > 0
    in_kept = keep[seg]
    key_bytes = data[in_kept & (pos < first_dot[seg])]
    part_bytes = data[in_kept & (pos > first_dot[seg])]
    key_len = first_dot[keep]
    part_len = lengths[keep] - key_len - 1
    return keep, _string_array(key_bytes, key_len), _string_array(part_bytes, part_len)


def _split_names_python(names: pa.Array) -> tuple[np.ndarray, pa.Array, pa.Array]:
    keep = np.zeros(len(names), dtype=bool)
    keys: list[str] = []
    parts: list[str] = []
    for i, raw in enumerate(names.to_pylist()):
        name = raw.decode("utf-8")
        if _skip_meta.match(name):
            continue
        m = _key_part.match(name)
        if m is None:
            continue
        keep[i] = True
        keys.append(m.group(1))
        parts.append(m.group(2))
    return keep, from_bytes_list(keys, pa.string()), from_bytes_list(parts, pa.string())
