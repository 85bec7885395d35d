"""`len()` of energon's datasets and loaders, as energon 7.4 computes it: pure integer arithmetic.

energon splits each dataset's N samples over the W = max(1, num_workers) * world_size global workers (N // W
each, the N % W remainder going to the workers picked by a generalized bit-reversal order, rotated by the samples
of the datasets before it), and a rank's length is the sum over its workers of what each worker's pipeline yields:
ceil (floor with drop_last) of its samples over the batch size, its samples when unbatched or grouped (energon's
upper bound), `virtual_epoch_length` split over the workers when set, `min(limit, ...)` for a val limit.

Also each worker's sequences (`worker_slice_offsets`, `slice_offsets`): its range cut at shard boundaries and every
`max_samples_per_sequence` samples, as energon's `workers_slice_offsets` does.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def bit_reversal_order(n: int) -> list[int]:
    """0..n-1 in generalized bit-reversal order: halve, order each half the same way, interleave the halves
    (for n = 8: 0 4 2 6 1 5 3 7)."""

    def order(items: list[int]) -> list[int]:
        if len(items) <= 2:
            return items
        mid = len(items) // 2
        left, right = order(items[:mid]), order(items[mid:])
        out = []
        for i in range(len(right)):
            if i < len(left):
                out.append(left[i])
            out.append(right[i])
        return out

    return order(list(range(n)))


def worker_ranges(
    total: int, rank: int, world_size: int, num_workers: int, rotation_offset: int = 0
) -> list[tuple[int, int]]:
    """[start, end) of the samples of a `total`-sample dataset that each worker of `rank` iterates (energon's
    sharder: contiguous slices in global worker order, their sizes permuted by the bit-reversal order)."""
    per_rank = max(1, num_workers)
    global_workers = per_rank * world_size
    base, extra = divmod(int(total), global_workers)
    linear = [
        base + (1 if (w - rotation_offset) % global_workers < extra else 0) for w in range(global_workers)
    ]
    counts = [0] * global_workers
    for old, new in enumerate(bit_reversal_order(global_workers)):
        counts[new] = linear[old]
    first = rank * per_rank
    start = sum(counts[:first])
    out = []
    for n in counts[first : first + per_rank]:
        out.append((start, start + n))
        start += n
    return out


def worker_sample_counts(
    total: int, rank: int, world_size: int, num_workers: int, rotation_offset: int = 0
) -> list[int]:
    """Samples of a `total`-sample dataset that each worker of `rank` iterates (energon's sharder split)."""
    return [
        end - start for start, end in worker_ranges(total, rank, world_size, num_workers, rotation_offset)
    ]


def rotation_offsets(sizes: Sequence[int], world_size: int, num_workers: int) -> list[int]:
    """The worker rotation of each dataset: the samples of the datasets before it, modulo the global workers.
    energon counts each dataset by its factory's length, the samples of its split's shards (a `subset:` and
    sample excludes do not shorten it): pass those (`rotation_sizes` of the callers)."""
    global_workers = max(1, num_workers) * world_size
    out, acc = [], 0
    for n in sizes:
        out.append(acc % global_workers)
        acc += int(n)
    return out


def batches(samples: int, batch_size: int | None, drop_last: bool, grouped: bool) -> int:
    """What one worker yields from `samples` samples."""
    if batch_size is None or grouped:
        return samples
    return samples // batch_size if drop_last else -(-samples // batch_size)


def energon_length(
    sizes: Sequence[int],
    *,
    rank: int,
    world_size: int,
    num_workers: int,
    batch_size: int | None,
    drop_last: bool = False,
    grouped: bool = False,
    repetitions: Sequence[float] | None = None,
    virtual_epoch_length: int = 0,
    limit: int | None = None,
    rotation_sizes: Sequence[int] | None = None,
) -> int:
    """len() of energon's dataset (and of its loaders) on `rank` over datasets of `sizes` samples.

    `repetitions`: blend_epochized repetitions per dataset (None: each dataset counted once, as for a single
    dataset, a weighted blend or concatenated val datasets); `rotation_sizes`: the lengths the worker rotation
    counts (`rotation_offsets`; default `sizes`)."""
    if virtual_epoch_length > 0:  # energon splits the virtual epoch over the workers: they sum up to it
        return int(virtual_epoch_length)
    workers = max(1, num_workers)
    per_worker = [0.0] * workers
    rotations = rotation_offsets(rotation_sizes or sizes, world_size, num_workers)
    for d, (n, rot) in enumerate(zip(sizes, rotations)):
        counts = worker_sample_counts(n, rank, world_size, num_workers, rot)
        r = 1 if repetitions is None else repetitions[d]
        for w in range(workers):
            per_worker[w] += counts[w] if r == 1 else int(counts[w] * r)
    total = sum(batches(int(n), batch_size, drop_last, grouped) for n in per_worker)
    if limit is not None and limit > 0:
        total = min(limit, total)
    return total


# ---- which sequences each worker reads -------------------------------------------------------------------------
def _split_piece(start: int, end: int, max_samples: int | None) -> list[int]:
    """Starts of the sequences of rows [start, end) of one shard (energon's rule: cut only pieces longer than
    1.5 sequences, into round(len / max) nearly equal sequences)."""
    if max_samples is not None and end - start > max_samples * 1.5:
        count = max(round((end - start) / max_samples), 1)
        step = (end - start) / count
        return [start + int(i * step) for i in range(count)]
    return [start]


def slice_offsets(start: int, end: int, shard_bounds: np.ndarray, max_samples: int | None) -> list[int]:
    """Sequence boundaries of rows [start, end): cut at the shard boundaries inside it, then every piece by
    `_split_piece`; empty sequences dropped."""
    inner = shard_bounds[(shard_bounds > start) & (shard_bounds < end)].tolist()
    cuts = [start, *inner, end]
    starts = [s for a, b in zip(cuts, cuts[1:]) for s in _split_piece(a, b, max_samples)]
    bounds = [*starts, end]
    return [int(a) for a, b in zip(bounds, bounds[1:]) if a < b] + [int(end)]


def worker_slice_offsets(
    sizes: Sequence[int],
    shard_bounds: Sequence[np.ndarray],
    rank: int,
    world_size: int,
    num_workers: int,
    max_samples: int | None,
    rotation_sizes: Sequence[int] | None = None,
) -> list[list[list[int]]]:
    """Per dataset, per worker of `rank`: its sequence boundaries (energon's workers_slice_offsets);
    `rotation_sizes`: the lengths the worker rotation counts (energon_len.rotation_offsets; default `sizes`)."""
    out = []
    rotations = rotation_offsets(rotation_sizes or sizes, world_size, num_workers)
    for n, bounds, rot in zip(sizes, shard_bounds, rotations):
        ranges = worker_ranges(n, rank, world_size, num_workers, rot)
        out.append([slice_offsets(s, e, np.asarray(bounds), max_samples) for s, e in ranges])
    return out
