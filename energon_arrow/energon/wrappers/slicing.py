"""Which samples of a split each worker of each rank reads (energon's per-worker sharding), as pure functions.

The rows [start, end) are cut into one contiguous range per global worker (rank * workers + worker): every
worker gets floor(n / W) rows and the first n % W workers of a rotated order one more, where the rotation is
`rotation_offset` (blends rotate it per dataset so the remainders spread over the workers) and the extra rows
are spread by a generalised bit-reversal order over the workers, as energon 7.4 does. The ranges are therefore
the same as energon's for the same split, rank, world size and worker count.
"""

from __future__ import annotations

from collections.abc import Sequence


def bit_reversal_order(indices: Sequence[int]) -> list[int]:
    """A balanced order of `indices`: split in halves recursively and interleave the halves' orders."""
    indices = list(indices)
    if len(indices) <= 2:
        return indices
    mid = len(indices) // 2
    left, right = bit_reversal_order(indices[:mid]), bit_reversal_order(indices[mid:])
    out = []
    for i in range(max(len(left), len(right))):
        out.extend(x[i] for x in (left, right) if i < len(x))
    return out


def worker_offsets(
    start: int, end: int, rank: int, world_size: int, num_workers: int, rotation_offset: int = 0
) -> list[int]:
    """Row boundaries of this rank's workers: worker k reads rows [out[k], out[k + 1])."""
    per_rank = max(1, num_workers)
    workers = per_rank * world_size
    total = end - start
    base, extra = divmod(total, workers)
    counts = [base + (1 if (g - rotation_offset) % workers < extra else 0) for g in range(workers)]
    permuted = [0] * workers
    for old, new in enumerate(bit_reversal_order(range(workers))):
        permuted[new] = counts[old]
    bounds = [start]
    for c in permuted:
        bounds.append(bounds[-1] + c)
    return bounds[rank * per_rank : (rank + 1) * per_rank + 1]
