"""Fast tar shard indexing: a hand-written header walk (no `tarfile`) and vectorised sample grouping.

- `index_shard(storage, rel, size=None, block_size=8 MiB) -> ShardIndex`: walk one shard (local: mmap; remote:
  one GET up to `WHOLE_READ_LIMIT`, else one sequential stream of `STREAM_WINDOW` pieces for the vectorised
  walk; the general walk over a sliding window where that cannot be used) and group its members into energon
  samples and parts.
- `index_bytes(data, url)`: the same for a shard already in memory.
  Both record the CRC32C of every part (`ShardIndex.part_crcs`, tar.crc) from the bytes the walk already has: the
  mapped file or the downloaded object, or, streamed, each window / block as it passes.
- `scan_members_fast(uint8_array)`: the vectorised walk for plain local shards (None: use the general one).
- `scan_members(read, size, shard)` / `build_shard_index(members, shard)`: the two steps, for custom sources.
- `TarFormatError(shard, reason, member, offset)`: every bad-shard error.
"""

from __future__ import annotations

import contextlib
import mmap

import numpy as np

from energon_arrow.tar.crc import part_crcs
from energon_arrow.tar.errors import TarFormatError
from energon_arrow.tar.fastscan import scan_members_fast, scan_windows_fast
from energon_arrow.tar.names import KEY_PART_RE, SKIP_META_RE, split_names
from energon_arrow.tar.samples import ShardIndex, build_shard_index
from energon_arrow.tar.scanner import Members, scan_members
from energon_arrow.tar.source import in_memory, open_source, stream_windows


def _map(storage, rel: str) -> np.ndarray:
    with open(storage.local_path(rel), "rb") as f:
        return np.frombuffer(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), dtype=np.uint8)


WHOLE_READ_LIMIT = 64 << 20  # remote shards up to this size are fetched whole with one GET
STREAM_WINDOW = 16 << 20  # larger ones: windows of this size for the vectorised walk (one range GET each)


def index_bytes(data: bytes, url: str) -> ShardIndex:
    """Index a whole shard held in memory (`url` names it in errors)."""
    members = scan_members_fast(np.frombuffer(data, dtype=np.uint8)) if len(data) >= 1024 else None
    if members is not None:
        return _with_crcs(build_shard_index(members, url), data)
    read = in_memory(data)
    return build_shard_index(scan_members(read, len(data), url, read.crc), url)


def _with_crcs(index: ShardIndex, data) -> ShardIndex:
    """`index` with the CRC32C of each part, computed from `data` (the whole shard)."""
    index.part_crcs = part_crcs(data, index.part_offsets, index.part_sizes)
    return index


def _observed(windows, observe):
    for offset, arr in windows:
        observe(arr)
        yield offset, arr


def reads_whole(storage, size: int) -> bool:
    """Whether `index_shard` reads a shard of `size` bytes with one GET of the whole object (remote, small)."""
    return not storage.is_local and 0 < size <= WHOLE_READ_LIMIT


def index_shard(
    storage, rel: str, size: int | None = None, block_size: int = 8 << 20, observe=None
) -> ShardIndex:
    """The index of shard `rel`. `observe(array)`: called with every byte of a remote shard streamed in windows,
    in order (e.g. to check them against the object's ETag), when the windowed walk indexes it; the general walk
    (extension headers, odd member types) does not call it."""
    if size is None:
        size = storage.stat(rel).size
    url = storage.url_of(rel)
    if storage.is_local and size >= 1024:
        mapped = _map(storage, rel)
        members = scan_members_fast(mapped)
        if members is not None:
            return _with_crcs(build_shard_index(members, url), mapped)
    elif reads_whole(storage, size):
        return index_bytes(storage.read_range(rel, 0, size), url)  # one GET, no HEAD
    elif not storage.is_local and size > WHOLE_READ_LIMIT and STREAM_WINDOW >= 512:
        with contextlib.closing(stream_windows(storage, rel, STREAM_WINDOW)) as windows:
            if observe is None:
                members = scan_windows_fast(windows, size)
            else:
                seen = _observed(windows, observe)
                members = scan_windows_fast(seen, size)
                for _ in seen if members is not None else ():  # the padding after the archive's end, too
                    pass
        if members is not None:
            return build_shard_index(members, url)
        # extension headers, odd types or bad input: the general walk reads the shard again from the start
    with open_source(storage, rel, size, block_size) as read:
        members = scan_members(read, size, url, read.crc)
    return build_shard_index(members, url)


__all__ = [
    "KEY_PART_RE",
    "SKIP_META_RE",
    "Members",
    "ShardIndex",
    "TarFormatError",
    "build_shard_index",
    "index_bytes",
    "index_shard",
    "reads_whole",
    "open_source",
    "scan_members",
    "scan_members_fast",
    "split_names",
]
