"""A shard's content fingerprint: a hash of a few fixed windows of its bytes that survives copies and uploads.

Modification times change when a dataset is copied (`cp -r`, `aws s3 sync`) and ETags change with the upload's
part size, so they cannot tell a copied shard from a changed one. The fingerprint can: it hashes the shard's size
and `FINGERPRINT_WINDOWS` windows of `FINGERPRINT_WINDOW` bytes spread evenly over `[0, data_end)` (the whole data
when it is smaller), where `data_end` is the end of the last member recorded by the index. The windows depend only
on `(size, data_end)`, so a reader computes the same ones from the side index with a few ranged reads and never
reads a whole shard.

- `fingerprint_ranges(size, data_end) -> [(offset, length)]`
- `fingerprint_of(size, data_end, chunks) -> str` (hex) of the bytes of those ranges; `fingerprint_of_bytes` of a
  shard read whole (prepare's small remote shards: no ranged reads)
- `read_fingerprints(storage, [(path, size, data_end)]) -> [str]`: all shards at once (exact ranged reads,
  concurrent on object stores).
"""

from __future__ import annotations

import hashlib

from energon_arrow.adapters.fetch import fetch_groups

FINGERPRINT_WINDOW = 4096
FINGERPRINT_WINDOWS = 5
_ALIGN = 512  # tar block


def fingerprint_ranges(size: int, data_end: int) -> list[tuple[int, int]]:
    """The (offset, length) windows hashed for a shard of `size` bytes whose data ends at `data_end`."""
    end = max(0, min(int(data_end), int(size)))
    if end <= FINGERPRINT_WINDOW * FINGERPRINT_WINDOWS:
        return [(0, end)] if end else []
    last = end - FINGERPRINT_WINDOW
    starts = [(last * i // (FINGERPRINT_WINDOWS - 1)) // _ALIGN * _ALIGN for i in range(FINGERPRINT_WINDOWS)]
    starts[-1] = last  # the tail of the last member, whatever its alignment
    return [(s, FINGERPRINT_WINDOW) for s in starts]


def fingerprint_of(size: int, data_end: int, chunks) -> str:
    digest = hashlib.blake2b(digest_size=16)
    digest.update(f"{int(size)}:{int(data_end)}".encode())
    for chunk in chunks:
        digest.update(chunk)
    return digest.hexdigest()


def fingerprint_of_bytes(data, size: int, data_end: int) -> str:
    """The fingerprint of a shard whose whole `size` bytes are `data` (no read)."""
    return fingerprint_of(size, data_end, [data[o : o + n] for o, n in fingerprint_ranges(size, data_end)])


def read_fingerprints(storage, shards: list[tuple[str, int, int]]) -> list[str]:
    """The current fingerprint of each `(path, size, data_end)` whose size is still `size` (the windows lie inside
    it). Exactly the windows are fetched, never coalesced into larger reads; concurrently on object stores."""
    rels, starts, ends, owner = [], [], [], []
    for i, (path, size, data_end) in enumerate(shards):
        for offset, length in fingerprint_ranges(size, data_end):
            rels.append(path)
            starts.append(offset)
            ends.append(offset + length)
            owner.append(i)
    chunks: list[list] = [[] for _ in shards]
    for i, data in zip(owner, fetch_groups(storage, rels, starts, ends) if rels else []):
        chunks[i].append(data)
    return [fingerprint_of(size, data_end, chunks[i]) for i, (_, size, data_end) in enumerate(shards)]
