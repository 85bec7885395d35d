"""A remote shard read whole for prepare, checked, with the storage option `verify="crc"` (or
ENERGON_ARROW_VERIFY=crc), against the MD5 its store records (the ETag of an object uploaded in one PUT is the MD5 of
its bytes): ranged GETs carry no checksum, so without a check a body damaged on its way is indexed as read, and
prepare publishes the CRC32Cs (and, where headers were hit, the offsets) of the damaged bytes. A mismatch is read
again (the storage's retry budget), then a StorageError naming the shard. Off by default: the MD5 of every byte
cost 25-30% of an S3 prepare's throughput on the 2-core development machine (328-335 against 416-487 MiB/s,
benchmarks/bench_prepare.py, alternating), where the loader's and token readers' checks cost 1-11%.

Not covered: objects uploaded in parts (their ETag is an MD5 of the parts' MD5s, `<hex>-<n>`), stores whose ETag is
no MD5, and shards over `tar.WHOLE_READ_LIMIT`, which prepare streams in windows (docs/reliability.md). Cost: one
MD5 pass over each shard read whole (hashlib, GIL released; ~0.7 GB/s per core).
"""

from __future__ import annotations

import hashlib
import re

from energon_arrow.adapters import StorageError
from energon_arrow.adapters.fetch import fetch_groups
from energon_arrow.adapters.retry import reread_attempts

_MD5_ETAG = re.compile(r"[0-9a-f]{32}")


def read_whole_checked(storage, rel: str, size: int):
    """The `size` bytes of remote shard `rel`, checked against its ETag where that is an MD5 and `verify="crc"`
    (module docstring)."""
    pins: dict[str, str] = {}
    data = bytes(fetch_groups(storage, [rel], [0], [size], pins)[0])
    etag = (pins.get(rel) or "").lower()
    if storage.io_settings.verify != "crc" or not _MD5_ETAG.fullmatch(etag):
        return data
    got, reads = hashlib.md5(data).hexdigest(), 1
    if got == etag:
        return data
    for _ in reread_attempts(storage):  # (each attempt after the policy's pause)
        data = bytes(fetch_groups(storage, [rel], [0], [size], pins)[0])
        got, reads = hashlib.md5(data).hexdigest(), reads + 1
        if got == etag:
            return data
    raise StorageError(
        storage.url_of(rel),
        f"GET: the bytes read have MD5 {got}, the store records {etag} (ETag); damaged on each of {reads} reads",
    )
