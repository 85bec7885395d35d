"""energon's validation order: each worker of a rank reads its own contiguous slice of every dataset, batches it
alone, and the loader takes one batch from each worker in turn.

The slices are energon's sharder split (energon_len.worker_ranges, rotated per dataset by the samples of the
datasets before it); a worker's stream is its slices of the datasets one after the other, cut into batches of
`batch_size` (its last batch partial, or dropped with `drop_last`); a val `limit` gives each worker its share of
the batches (energon's LimitDataset); batches come round robin over the workers, skipping those that are done
(torch's DataLoader order). One worker on one rank: the split in order. `WorkerSliceSchedule.slots(b)` gives the
(source, position) of the samples of this rank's b-th batch, like BatchSchedule.slots for the global batches.
"""

from __future__ import annotations

import numpy as np

from energon_arrow.energon.energon_len import rotation_offsets, worker_ranges


class WorkerSliceSchedule:
    def __init__(
        self,
        sizes: list[int],
        batch_size: int,
        rank: int,
        world_size: int,
        num_workers: int,
        drop_last: bool = False,
        limit: int | None = None,
    ):
        workers = max(1, int(num_workers))
        self.batch_size = int(batch_size)
        rotations = rotation_offsets(sizes, world_size, num_workers)
        ranges = [worker_ranges(n, rank, world_size, num_workers, rot) for n, rot in zip(sizes, rotations)]
        #: per worker: its (source, start, end) slices in stream order
        self.segments = [[(d, *ranges[d][w]) for d in range(len(sizes))] for w in range(workers)]
        self.lengths = [sum(e - s for _, s, e in seg) for seg in self.segments]
        per_worker = [n // batch_size if drop_last else -(-n // batch_size) for n in self.lengths]
        if limit is not None and workers > 1:  # energon's LimitDataset: each worker its share of the batches
            per_worker = [min(n, limit // workers + (w < limit % workers)) for w, n in enumerate(per_worker)]
        elif limit is not None:
            per_worker = [min(n, limit) for n in per_worker]
        worker = np.repeat(np.arange(workers), per_worker)
        index = np.concatenate([np.arange(n) for n in per_worker]) if per_worker else np.zeros(0, np.int64)
        order = np.lexsort((worker, index))  # round robin: each worker's i-th batch, then the (i+1)-th
        self.worker, self.index = worker[order], index[order]
        #: batches this rank yields in one pass
        self.rank_batches = len(order)

    def slots(
        self, b: int, start: int = 0, end: int = 0, limit: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(source, position in that source) of each sample of this rank's batch b (empty past the last);
        `start`, `end`, `limit` (BatchSchedule's slice of a global batch) do not apply: b is this rank's own."""
        if b >= self.rank_batches:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        w, i = int(self.worker[b]), int(self.index[b])
        lo, hi = i * self.batch_size, min((i + 1) * self.batch_size, self.lengths[w])
        owners, positions, at = [], [], 0
        for d, s, e in self.segments[w]:
            a, z = max(lo, at), min(hi, at + e - s)
            if a < z:
                owners.append(np.full(z - a, d, np.int64))
                positions.append(np.arange(s + a - at, s + z - at, dtype=np.int64))
            at += e - s
        return np.concatenate(owners), np.concatenate(positions)
