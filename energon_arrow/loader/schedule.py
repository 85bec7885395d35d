"""Which source and which stream positions fill each slot of a global batch: pure functions of (seed, batch).

- one source, or `concat` (validation): the slots of batch b are positions [b*G, (b+1)*G) of the concatenated
  sources, in order;
- `blend` (weights, or blend_epochized repetitions as weights repetitions * samples): source d owns the slots
  between floor(b*G*C[d-1]) and floor(b*G*C[d]) of the cumulative weights C, so every prefix of the stream holds
  each source in its exact proportion (up to rounding) and source d's own stream positions are known in O(1);
  the slots of each batch are then permuted with a (seed, b) generator so sources mix inside the batch.
"""

from __future__ import annotations

import numpy as np

from energon_arrow.loader.order import _rng


class BatchSchedule:
    def __init__(
        self, sizes: list[int], global_batch_size: int, seed: int, weights: list[float] | None = None
    ):
        if global_batch_size < 1:
            raise ValueError(f"global batch size must be >= 1, got {global_batch_size}")
        self.sizes = np.asarray(sizes, np.int64)
        self.G = int(global_batch_size)
        self.seed = int(seed)
        self.blend = weights is not None and len(sizes) > 1
        if weights is not None:
            w = np.asarray(weights, np.float64)
            if (w < 0).any() or w.sum() <= 0:
                raise ValueError(f"blend weights must be >= 0 and not all 0, got {list(weights)}")
            self.cum = np.cumsum(w / w.sum())
            self.cum[-1] = 1.0
        self.offsets = np.r_[0, np.cumsum(self.sizes)]

    def _boundaries(self, b: int) -> np.ndarray:
        return np.r_[0, np.floor(b * self.G * self.cum).astype(np.int64)]

    def slots(self, b: int, start: int, end: int, limit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(source, position in that source's stream) of each slot in [start, end) of global batch b, in slot
        order. `limit`: total stream length when the stream does not repeat (later slots are dropped)."""
        if not self.blend:
            pos = np.arange(b * self.G + start, b * self.G + end, dtype=np.int64)
            if limit is not None:
                pos = pos[pos < limit]
            src = (
                np.searchsorted(self.offsets, pos, side="right") - 1
                if len(self.sizes) > 1
                else np.zeros_like(pos)
            )
            return src, pos - self.offsets[src]
        lo, hi = self._boundaries(b), self._boundaries(b + 1)
        counts = np.diff(hi) - np.diff(lo)
        owner = np.repeat(np.arange(len(counts)), counts)
        within = np.arange(self.G) - np.repeat(np.r_[0, np.cumsum(counts)[:-1]], counts)
        perm = _rng(self.seed, b, 1).permutation(self.G)
        owner, within = owner[perm][start:end], within[perm][start:end]
        pos = np.diff(lo)[owner] + within  # each source's stream continues where batch b-1 left it
        if limit is not None:
            keep = b * self.G + np.arange(start, end) < limit
            owner, pos = owner[keep], pos[keep]
        return owner, pos
