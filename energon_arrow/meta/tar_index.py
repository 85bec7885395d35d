"""`<shard>.tar.idx` next to each tar: native-endian uint64 offsets, count + 1 entries.

Entry i is the offset of the first header block of sample i (PAX/GNU long-name headers included); the last
entry is the end of the last member's padded data. `tar_index_name("a/s.tar") == "a/s.tar.idx"` (energon
replaces the shard's last suffix with `.tar.idx`); `tar_index_bytes(offsets)`, `read_tar_index(storage, shard)`.
"""

from __future__ import annotations

import posixpath

import numpy as np

from energon_arrow.meta.errors import MetaError
from energon_arrow.meta.manifest import read_verified


def tar_index_name(shard: str) -> str:
    stem, ext = posixpath.splitext(shard)
    return (stem if ext and "/" not in ext else shard) + ".tar.idx"


def tar_index_bytes(offsets) -> bytes:
    return np.ascontiguousarray(offsets, dtype=np.uint64).tobytes()


def read_tar_index(storage, shard: str) -> np.ndarray:
    rel = tar_index_name(shard)
    data = read_verified(storage, rel)
    if len(data) % 8 or not data:
        raise MetaError(f"{storage.url_of(rel)}: size {len(data)} is not a positive multiple of 8")
    return np.frombuffer(data, dtype=np.uint64).astype(np.int64)
