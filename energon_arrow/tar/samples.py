"""Members -> energon samples and parts.

A sample starts whenever the key differs from the previous kept member's (names are split by
`energon_arrow.tar.names`). Its `byte_offset` is the first header block of its first member, `byte_size` runs to
the next sample's offset (or the end of the data); parts keep the raw payload offset and size. Keys must be
contiguous within a shard (`TarFormatError` otherwise).

`build_shard_index(members, shard) -> ShardIndex`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from energon_arrow.tar.arrow import bools_to_numpy, from_numpy
from energon_arrow.tar.errors import TarFormatError
from energon_arrow.tar.names import NameDecodeError, split_names
from energon_arrow.tar.scanner import Members


@dataclass
class ShardIndex:
    """Index of one shard: samples and parts as Arrow/numpy columns, plus the `.tar.idx` offsets."""

    sample_keys: pa.Array  # string
    sample_offsets: np.ndarray  # int64
    sample_sizes: np.ndarray  # int64
    part_sample_index: np.ndarray  # int64
    part_names: pa.Array  # string
    part_offsets: np.ndarray  # int64
    part_sizes: np.ndarray  # int64
    data_end: int
    fingerprint: str | None = None  # energon_arrow.index.fingerprint of the shard, set by prepare's workers
    part_crcs: np.ndarray | None = None  # uint32 CRC32C of each part's payload (tar.crc); None: not recorded

    @property
    def sample_count(self) -> int:
        return len(self.sample_offsets)

    @property
    def part_count(self) -> int:
        return len(self.part_offsets)

    def tar_index(self) -> np.ndarray:
        """energon's `.tar.idx` content: sample offsets followed by the end of the data (uint64)."""
        return np.append(self.sample_offsets, self.data_end).astype(np.uint64)

    def part_types(self, limit: int = 50) -> list[str]:
        return sorted(pc.unique(self.part_names).to_pylist())[:limit]


def build_shard_index(members: Members, shard: str) -> ShardIndex:
    try:
        keep, keys, parts = split_names(members.names)
    except NameDecodeError as exc:
        raw = members.names[exc.index].as_py()
        raise TarFormatError(
            shard,
            "member name is not valid UTF-8",
            raw.decode("utf-8", "replace"),
            int(members.start[exc.index]),
        ) from None
    idx = np.nonzero(keep)[0]
    n = len(keys)
    if n == 0:
        raise TarFormatError(shard, "no samples: no member name has the form <key>.<part>")
    new = np.ones(n, dtype=bool)
    if n > 1:
        new[1:] = bools_to_numpy(pc.not_equal(keys[1:], keys[:-1]))
    first = np.nonzero(new)[0]
    sample_keys = keys.take(from_numpy(first))
    if pc.count_distinct(sample_keys).as_py() != len(first):
        _raise_non_contiguous(sample_keys, members, idx[first], shard)
    starts = members.start[idx[first]]
    ends = np.append(starts[1:], members.data_end)
    return ShardIndex(
        sample_keys=sample_keys,
        sample_offsets=starts,
        sample_sizes=ends - starts,
        part_sample_index=np.cumsum(new, dtype=np.int64) - 1,
        part_names=parts,
        part_offsets=members.data_offset[idx],
        part_sizes=members.size[idx],
        data_end=members.data_end,
        part_crcs=None if members.crc is None else members.crc[idx],
    )


def _raise_non_contiguous(sample_keys: pa.Array, members: Members, member_idx: np.ndarray, shard: str):
    seen: dict[str, int] = {}
    for i, key in enumerate(sample_keys.to_pylist()):
        if key in seen:
            m = int(member_idx[i])
            first_at = int(members.start[member_idx[seen[key]]])
            raise TarFormatError(
                shard,
                f"sample key {key!r} appears again after other keys (first seen at byte offset {first_at}); "
                "keys must be contiguous within a shard",
                members.names[m].as_py().decode("utf-8", "replace"),
                int(members.start[m]),
            )
        seen[key] = i
