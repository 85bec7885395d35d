"""Resumable prepare: every indexed shard's rows are kept in a work folder under `.nv-meta` until the index is
published, so that a prepare that was killed (or failed) continues from the shards it already indexed.

`WorkFolder(storage)`: `.nv-meta/.prepare-work/`. Each entry holds one shard's `ShardIndex` (samples and parts
as two Arrow IPC streams, the data end and fingerprint in the schema metadata) and is published atomically
(temporary name + rename locally, one PUT on object stores) by the worker that indexed the shard. An entry's name
is a digest of the shard path, size, mtime and ETag and of this format's version, so a shard that changed since
(or an entry from another version) is never found: it is indexed again. `entries()` lists the folder once;
`name_of(FileInfo)` / `load(FileInfo)` / `save(FileInfo-like, index)`; `clear()` removes the folder (at the end of
a successful prepare, and at the start of a `--force-overwrite` one).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import struct

import numpy as np
import pyarrow as pa

from energon_arrow.adapters import NotFound, StorageError
from energon_arrow.meta.constants import META_DIR
from energon_arrow.tar.arrow import from_numpy, ints_to_numpy
from energon_arrow.tar.samples import ShardIndex

WORK_DIR = f"{META_DIR}/.prepare-work"
FORMAT = 2  # 2: parts carry their CRC32C (entries of format 1 are not found: those shards are indexed again)
_SAMPLES = pa.schema([("sample_key", pa.string()), ("offset", pa.int64()), ("size", pa.int64())])
_PARTS = pa.schema(
    [
        ("sample_index", pa.int64()),
        ("name", pa.string()),
        ("offset", pa.int64()),
        ("size", pa.int64()),
        ("crc32c", pa.uint32()),
    ]
)


def _stream(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue()


def encode(index: ShardIndex) -> bytes:
    meta = {b"data_end": str(index.data_end).encode(), b"fingerprint": json.dumps(index.fingerprint).encode()}
    samples = pa.Table.from_arrays(
        [
            index.sample_keys.cast(pa.string()),
            from_numpy(index.sample_offsets),
            from_numpy(index.sample_sizes),
        ],
        schema=_SAMPLES.with_metadata(meta),
    )
    parts = pa.Table.from_arrays(
        [
            from_numpy(index.part_sample_index),
            index.part_names.cast(pa.string()),
            from_numpy(index.part_offsets),
            from_numpy(index.part_sizes),
            pa.nulls(len(index.part_offsets), pa.uint32())
            if index.part_crcs is None
            else from_numpy(np.asarray(index.part_crcs, np.uint32), np.uint32),
        ],
        schema=_PARTS,
    )
    first = _stream(samples)
    return struct.pack("<Q", len(first)) + first + _stream(parts)


def decode(data: bytes) -> ShardIndex:
    (n,) = struct.unpack_from("<Q", data)
    samples = pa.ipc.open_stream(memoryview(data)[8 : 8 + n]).read_all()
    parts = pa.ipc.open_stream(memoryview(data)[8 + n :]).read_all()
    meta = samples.schema.metadata
    return ShardIndex(
        sample_keys=samples.column("sample_key").combine_chunks(),
        sample_offsets=ints_to_numpy(samples.column("offset")),
        sample_sizes=ints_to_numpy(samples.column("size")),
        part_sample_index=ints_to_numpy(parts.column("sample_index")),
        part_names=parts.column("name").combine_chunks(),
        part_offsets=ints_to_numpy(parts.column("offset")),
        part_sizes=ints_to_numpy(parts.column("size")),
        data_end=int(meta[b"data_end"]),
        fingerprint=json.loads(meta[b"fingerprint"]),
        part_crcs=None if parts.column("crc32c").null_count else ints_to_numpy(parts.column("crc32c")),
    )


def entry_name(path: str, size: int, mtime: float | None, etag: str | None) -> str:
    key = json.dumps([FORMAT, path, size, mtime, etag]).encode()
    return hashlib.sha256(key).hexdigest()[:32] + ".arrow"


class WorkFolder:
    def __init__(self, storage):
        self.storage = storage

    def name_of(self, f) -> str:
        return f"{WORK_DIR}/{entry_name(f.path, f.size, f.mtime, f.etag)}"

    def entries(self) -> set[str]:
        """Names (relative to the storage root) of the entries present now: one listing."""
        if not self.storage.isdir(WORK_DIR):
            return set()
        return {
            f"{WORK_DIR}/{f.path.rsplit('/', 1)[-1]}" for f in self.storage.child(WORK_DIR).scan("*.arrow")
        }

    def save(self, name: str, index: ShardIndex) -> None:
        """Publish entry `name` (from `name_of`). Locally a temporary name and a rename, not fsynced: it must
        survive the process (kill -9), not the machine; a torn entry fails to decode and is indexed again."""
        data = encode(index)
        if not self.storage.is_local:
            self.storage.write_atomic(name, data)
            return
        path = self.storage.local_path(name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "wb") as out:
            out.write(data)
        os.replace(tmp, path)

    def load(self, f) -> ShardIndex | None:
        """The entry of shard `f`, None when it is gone or unreadable (the shard is then indexed again)."""
        try:
            return decode(self.storage.read_bytes(self.name_of(f)))
        except NotFound:
            return None
        except (pa.ArrowException, struct.error, KeyError, ValueError):
            return None

    def clear(self) -> None:
        try:
            self.storage.remove(WORK_DIR, recursive=True)
        except StorageError:
            # some object stores (SeaweedFS) keep listing an emptied folder as an object of its own: what
            # matters is that no entry is left
            if self.entries():
                raise
