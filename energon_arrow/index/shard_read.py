"""Remote shards read for prepare, checked, with the storage option `verify="crc"` (or ENERGON_ARROW_VERIFY=crc),
against the MD5s their store records in the ETag (adapters.etag_md5: one PUT, or a multipart upload of a usual part
size): ranged GETs carry no checksum, so without a check a body damaged on its way is indexed as read, and prepare
publishes the CRC32Cs (and, where headers were hit, the offsets) of the damaged bytes. A mismatch is read again
(the storage's retry budget), then a StorageError naming the shard.

- `read_whole_checked`: a shard up to `tar.WHOLE_READ_LIMIT` read with one GET (the ETag comes with it);
- `index_streamed_checked`: a larger shard indexed from one sequential stream of windows, each window hashed as the
  walk passes it (the ETag from one HEAD); the whole shard is indexed again on a mismatch.

Off by default: the MD5 of every byte cost 25-30% of an S3 prepare's throughput on the 2-core development machine
(328-335 against 416-487 MiB/s, benchmarks/bench_prepare.py, alternating), where the loader's and token readers'
checks cost 1-11%. Not covered: stores whose ETag is no MD5 (SSE-KMS: every read mismatches, a clear error),
multipart uploads of another part size (two agreeing reads are taken, with a warning), and large shards that the
windowed walk cannot index (extension headers: the general walk reads them unchecked).
"""

from __future__ import annotations

import logging

from energon_arrow.adapters import StorageError
from energon_arrow.adapters.etag_md5 import EtagMd5
from energon_arrow.adapters.fetch import fetch_groups
from energon_arrow.adapters.retry import reread_attempts
from energon_arrow.tar import index_shard
from energon_arrow.tar.samples import ShardIndex

log = logging.getLogger(__name__)


def _damaged(storage, rel: str, check: EtagMd5, reads: int) -> StorageError:
    return StorageError(
        storage.url_of(rel),
        f"GET: the bytes read have MD5 {check.got()}, the store records {check.etag} (ETag); damaged on each of "
        f"{reads} reads",
    )


def _unknown_part_size(storage, rel: str, check: EtagMd5, earlier: str | None) -> bool:
    if not check.stable(earlier):
        return False
    log.warning(
        "%s: two reads agree but match no usual part size of its multipart ETag %s: not checked",
        storage.url_of(rel),
        check.etag,
    )
    return True


def _checked(storage, rel: str, read):
    """`read()` -> (result, the EtagMd5 its bytes were fed to) of remote shard `rel`, done again while the bytes do
    not match the ETag (the storage's retry budget), then a StorageError."""
    reads, attempts, earlier = 0, reread_attempts(storage), None
    while True:
        result, check = read()
        reads += 1
        # not checkable, or fed less than the shard (the general walk read it): not covered
        if not check.checkable or check.fed != check.size or check.matches():
            return result
        if _unknown_part_size(storage, rel, check, earlier):
            return result
        earlier = check.got()
        if next(attempts, None) is None:  # (each attempt after the policy's pause)
            raise _damaged(storage, rel, check, reads)


def read_whole_checked(storage, rel: str, size: int):
    """The `size` bytes of remote shard `rel`, checked against its ETag where `verify="crc"` (module docstring)."""
    pins: dict[str, str] = {}

    def fetch() -> bytes:
        return bytes(fetch_groups(storage, [rel], [0], [size], pins)[0])

    if storage.io_settings.verify != "crc":
        return fetch()

    def read():
        data = fetch()
        check = EtagMd5(pins.get(rel), size)  # the ETag the GET returned
        if check.checkable:
            check.update(data)
        return data, check

    return _checked(storage, rel, read)


def index_streamed_checked(storage, rel: str, size: int) -> ShardIndex:
    """`tar.index_shard` of a remote shard too large to read whole, its bytes checked against its ETag where
    `verify="crc"` (module docstring)."""
    if storage.io_settings.verify != "crc":
        return index_shard(storage, rel, size)
    etag = storage.stat(rel).etag

    def read():
        check = EtagMd5(etag, size)
        observe = check.update if check.checkable else None
        return index_shard(storage, rel, size, observe=observe), check

    return _checked(storage, rel, read)
