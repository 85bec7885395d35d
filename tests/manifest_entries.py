"""What a manifest entry must say about a published file's bytes (shared by the local and S3 manifest tests)."""

from __future__ import annotations

import base64
import hashlib

import numpy as np
from crc32c import crc32c


def assert_entry_describes(entry: dict, data: bytes, rel: str) -> None:
    """`entry` (a manifest's JSON entry for `rel`) records the size and SHA-256 of `data`; side-index files (scanned
    in place by ranges) also the CRC32C of every chunk, and nothing else does."""
    assert {k: entry[k] for k in ("size", "sha256")} == {
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }, rel
    assert ("chunks" in entry) == rel.startswith(".nv-meta/arrow/"), rel
    if "chunks" in entry:
        crcs = np.frombuffer(base64.b64decode(entry["chunks"]["crc32c"]), "<u4").tolist()
        step = entry["chunks"]["bytes"]
        assert crcs == [crc32c(data[i : i + step]) for i in range(0, len(data), step)], rel
