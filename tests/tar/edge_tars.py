"""Edge-case tar shards (built with Python's tarfile) and energon's reading of them, for tests."""

from __future__ import annotations

import gzip
import io
import re
import tarfile

SPLIT_NAME = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
SKIP_META = re.compile(r"__[^/]*__($|/)")


def _add(tar: tarfile.TarFile, name: str, data: bytes = b"x", kind: bytes = tarfile.REGTYPE, link: str = ""):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mtime = 1_700_000_000
    if kind == tarfile.REGTYPE:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    else:
        info.linkname = link
        tar.addfile(info)


def build_tar(members, fmt=tarfile.PAX_FORMAT, pax_headers=None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(
        fileobj=buf, mode="w", format=fmt, pax_headers=pax_headers or {}, encoding="utf-8"
    ) as tar:
        for m in members:
            _add(tar, *m) if isinstance(m, tuple) else _add(tar, m)
    return buf.getvalue()


LONG_DIR = "d" * 60 + "/" + "e" * 70
EDGE_MEMBERS = [
    ("__meta__/info.json", b"{}"),
    ("folder", b"", tarfile.DIRTYPE),
    ("folder/s0.jpg", b"\xff\xd8" * 100),
    ("folder/s0.txt", b"caption"),
    ("folder/link.txt", b"", tarfile.SYMTYPE, "s0.txt"),
    ("folder/s0.txt", b"again"),  # the same part twice in a row
    ("README", b"no dot: skipped"),
    (".hidden.txt", b"dot-file: skipped"),
    ("dir.v1/sub/k1.seg.txt", b"key dirs with dots"),
    ("dir.v1/sub/k1.JPG", b"upper"),
    ("dir.v1/sub/k2.empty", b""),  # zero-byte part
    (f"{LONG_DIR}/{'k' * 120}.json", b'{"long": 1}'),
    (f"{LONG_DIR}/{'k' * 120}.txt", "é ü".encode()),
    ("nested/.dot/.x.y", b"basename starting with a dot inside folders"),
    ("k3.tar.gz", b"multi-dot part"),
]


def edge_tar(fmt=tarfile.PAX_FORMAT, prefix: str = "") -> bytes:
    """The edge members; `prefix` is put before every name (to keep keys unique across shards)."""
    return build_tar([(prefix + m[0], *m[1:]) for m in EDGE_MEMBERS], fmt)


def energon_view(data: bytes):
    """(tar.idx offsets, [(sample_index, key, part, data_offset, size)]) as energon 7.4.1 indexes the bytes."""
    offsets, parts, keys = [], [], []
    last = None
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for m in tar:
            if not m.isreg() or SKIP_META.match(m.name):
                continue
            match = SPLIT_NAME.match(m.name)
            if match is None:
                continue
            if match.group(1) != last:
                offsets.append(m.offset)
                keys.append(match.group(1))
                last = match.group(1)
            parts.append((len(offsets) - 1, keys[-1], match.group(2), m.offset_data, m.size))
        offsets.append(tar.offset)
    return offsets, parts


def our_view(index):
    keys = index.sample_keys.to_pylist()
    si = index.part_sample_index.tolist()
    return index.tar_index().tolist(), [
        (s, keys[s], p, o, z)
        for s, p, o, z in zip(
            si, index.part_names.to_pylist(), index.part_offsets.tolist(), index.part_sizes.tolist()
        )
    ]


def gzipped(data: bytes) -> bytes:
    return gzip.compress(data)
