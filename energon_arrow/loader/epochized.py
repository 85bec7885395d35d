"""`blend_epochized` batches: energon's repetition semantics as pure functions of (seed, batch).

One blend epoch holds m[d] = floor(r[d]) * P[d] + floor(frac(r[d]) * n[d]) samples of source d (n[d] samples,
r[d] repetitions, P[d] the samples of one full pass: n[d], or k * n[d] when the source is shuffled over k epochs):
every sample of each whole repetition (k times over with shuffle_over_epochs k, as energon's inner dataset yields
k epochs per pass), then the first floor(frac * n) samples of one more pass, like energon's
`RepeatDataset(repeats=r)` inside its `BlendDataset` (with one worker; see docs/migration.md).
The stream is the concatenation of blend epochs of M = sum(m) samples. Inside an epoch the first p positions are
apportioned source by source: source d owns c[d] = floor(R[d] * m[d] / (m[d] + ... + m[-1])) of the R[d] positions
the sources before it left (R[0] = p, R[d+1] = R[d] - c[d]); exact integers, non-decreasing in p, and an epoch
holds exactly m[d] samples of source d; the slots of a batch are shuffled with a (seed, batch, epoch) generator, never
across an epoch boundary, so each epoch's multiset is exact whatever the batch size.

Source d's k-th sample of the stream is pass `E * ceil(r) + j // P`, index `j % P` with E = k // m, j = k % m: each
blend epoch starts fresh passes, and a pass is one epoch of the source's own `EpochCache` order.
"""

from __future__ import annotations

import math

import numpy as np

from energon_arrow.loader.order import _rng


class EpochizedSchedule:
    def __init__(
        self,
        sizes: list[int],
        repetitions: list[float],
        global_batch_size: int,
        seed: int,
        pass_lengths: list[int] | None = None,
    ):
        """`pass_lengths`: each source's samples per full pass (its `EpochCache.n`; default `sizes`)."""
        if global_batch_size < 1:
            raise ValueError(f"global batch size must be >= 1, got {global_batch_size}")
        if len(sizes) != len(repetitions):
            raise ValueError("one repetition count per source is needed")
        self.sizes = [int(n) for n in sizes]
        self.reps = [float(r) for r in repetitions]
        if any(r < 0 for r in self.reps):
            raise ValueError(f"repetitions must be >= 0, got {repetitions}")
        self.spans = self.sizes if pass_lengths is None else [int(p) for p in pass_lengths]
        if len(self.spans) != len(self.sizes):
            raise ValueError("one pass length per source is needed")
        self.m = [
            math.floor(r) * span + math.floor((r - math.floor(r)) * n)
            for n, span, r in zip(self.sizes, self.spans, self.reps)
        ]
        self.passes = [max(1, math.ceil(r)) for r in self.reps]
        self.M = sum(self.m)
        self.tails = [sum(self.m[d:]) for d in range(len(self.m))]
        if self.M <= 0:
            raise ValueError("blend_epochized epoch is empty (no samples in any repetition)")
        self.G = int(global_batch_size)
        self.seed = int(seed)

    @property
    def epoch_length(self) -> int:
        return self.M

    def _counts(self, p: int) -> np.ndarray:
        """Samples of each source among the first p positions of the stream (exact integer arithmetic)."""
        e, left = divmod(int(p), self.M)
        owned = []
        for m, rest in zip(self.m, self.tails):  # rest: samples of this source and those after it
            c = left * m // rest if rest else 0
            owned.append(c)
            left -= c
        return e * np.asarray(self.m, np.int64) + np.asarray(owned, np.int64)

    def _positions(self, d: int, k: np.ndarray) -> np.ndarray:
        """Position in source d's `EpochCache` stream of its k-th sample of the blend stream."""
        span, m = self.spans[d], self.m[d]
        e, j = np.divmod(k, m)
        return (e * self.passes[d] + j // span) * span + j % span

    def slots(self, b: int, start: int, end: int, limit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(source, position in that source's cache stream) of each slot in [start, end) of global batch b."""
        lo, hi = b * self.G, (b + 1) * self.G
        if limit is not None:
            hi = min(hi, limit)
        owners, ks = [], []
        seg = lo
        while seg < hi:
            seg_end = min(hi, (seg // self.M + 1) * self.M)
            c0, c1 = self._counts(seg), self._counts(seg_end)
            counts = c1 - c0
            owner = np.repeat(np.arange(len(counts)), counts)
            k = c0[owner] + np.arange(len(owner)) - np.repeat(np.r_[0, np.cumsum(counts)[:-1]], counts)
            perm = _rng(self.seed, b, 2 + seg // self.M).permutation(len(owner))
            owners.append(owner[perm])
            ks.append(k[perm])
            seg = seg_end
        if not owners:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        owner = np.concatenate(owners)[start:end]
        k = np.concatenate(ks)[start:end]
        pos = np.empty(len(k), np.int64)
        for d in np.unique(owner).tolist():
            sel = owner == d
            pos[sel] = self._positions(d, k[sel])
        return owner, pos
