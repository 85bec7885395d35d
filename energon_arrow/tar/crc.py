"""CRC32C (Castagnoli) of sample parts: what prepare records per part and the loader checks with `verify="crc"`.

The `crc32c` package computes it with the CPU's CRC32 instructions (SSE4.2 / ARMv8: ~12 GB/s on one core here)
and takes any contiguous buffer (bytes, mmap, memoryview, numpy slices) without copying; one call per part.

- `crc32c(data, value=0) -> int`: the CRC of `data`, continued from `value` (the CRC of the bytes before it);
- `part_crcs(buffer, offsets, sizes) -> uint32 array`: the CRC of `buffer[offsets[i] : offsets[i] + sizes[i]]`
  for every i (a whole shard held in memory or memory-mapped).
"""

from __future__ import annotations

import numpy as np
from crc32c import crc32c

__all__ = ["crc32c", "part_crcs"]


def part_crcs(buffer, offsets: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    out = np.empty(len(offsets), np.uint32)
    with memoryview(buffer) as view:
        flat = view.cast("B") if view.format != "B" or view.ndim != 1 else view
        for i, (lo, n) in enumerate(zip(offsets.tolist(), sizes.tolist())):
            out[i] = crc32c(flat[lo : lo + n])
        if flat is not view:
            flat.release()
    return out
