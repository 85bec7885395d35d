"""Epoch order: a pure function of (seed, epoch), evaluated lazily for the positions a batch needs.

The rows of the effective sample table are cut into blocks of at most `block_size` consecutive samples of one
shard. Epoch e visits the blocks in a permuted order and the samples of each block in a permuted order (in
table order with `in_order`: energon's max_samples_per_sequence=None reads each sequence sequentially), so a
batch reads a few contiguous byte ranges per shard. An optional shuffle buffer then reorders positions by the key
`p + u(p) * shuffle_buffer` (u uniform in [0, 1)), which moves every sample by less than `shuffle_buffer`
positions, like a streaming shuffle buffer of that size.

With energon's `shuffle_over_epochs` k > 1 an "epoch" here spans k epochs: the block list repeated k times is
permuted as one, so every sample is seen k times in k * n positions; with -1 blocks are drawn with replacement
(each n positions draw fresh blocks; the block crossing the n-th position is cut there); with None blocks and
samples keep table order (the shuffle buffer still applies).

Only O(blocks) state is kept per epoch (the block permutation and its cumulative sizes); the permutation inside
a block and the buffer keys come from a counter-based hash of (seed, epoch, row or position), so any position of
any epoch is computed in O(batch + shuffle_buffer) without materialising the epoch. A worker's memory therefore
does not grow with the dataset.
"""

from __future__ import annotations

import numpy as np

_M1, _M2, _GOLD = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB), np.uint64(0x9E3779B97F4A7C15)


def _rng(seed: int, epoch: int, stream: int = 0) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64([int(seed) & 0xFFFFFFFF, int(epoch), int(stream)]))


def hash_uniform(seed: int, epoch: int, stream: int, values: np.ndarray) -> np.ndarray:
    """Deterministic uniform floats in [0, 1) for each value (splitmix64 of seed/epoch/stream/value)."""
    base = np.uint64((int(seed) * 0x100000001B3 + int(epoch) * 0x1F1F1F1F + int(stream) * 0x51ED27) % 2**64)
    with np.errstate(over="ignore"):
        z = np.asarray(values).astype(np.uint64) * _GOLD + base
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / 2**53)


class BlockLayout:
    """Blocks of the table: start row and size of each (a new block at every shard change and every
    `block_size` rows inside a shard). Computed once, before DataLoader workers fork."""

    def __init__(self, shard_ids: np.ndarray, block_size: int):
        shard_ids = np.asarray(shard_ids)
        n = len(shard_ids)
        runs = np.flatnonzero(np.r_[True, shard_ids[1:] != shard_ids[:-1]]) if n else np.zeros(0, np.int64)
        self._cut(runs, np.diff(np.r_[runs, n]), n, block_size)

    @classmethod
    def from_runs(cls, run_starts: np.ndarray, run_lengths: np.ndarray, block_size: int) -> BlockLayout:
        """The layout of a table given only its runs of one shard (start row, length): O(runs), no table."""
        self = cls.__new__(cls)
        run_starts = np.asarray(run_starts, np.int64)
        run_lengths = np.asarray(run_lengths, np.int64)
        self._cut(run_starts, run_lengths, int(run_lengths.sum()), block_size)
        return self

    def _cut(self, runs: np.ndarray, lengths: np.ndarray, n: int, block_size: int) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.n = n
        if n == 0:
            self.starts = np.zeros(0, np.int64)
            self.sizes = np.zeros(0, np.int64)
            return
        per_run = -(-lengths // block_size)
        # block j of the table, the k-th of its run r: starts at runs[r] + k * block_size, where k is j minus the
        # run's first block; one repeat of the per-run constant (runs[r] - first block * block_size) does it
        before = np.cumsum(per_run) - per_run
        self.starts = np.repeat(runs - before * block_size, per_run)
        self.starts += np.arange(int(per_run.sum()), dtype=np.int64) * block_size
        self.sizes = np.repeat(runs + lengths, per_run)
        self.sizes -= self.starts
        np.minimum(self.sizes, block_size, out=self.sizes)


def combine_multipliers(outer: int | None, inner: int | None) -> int | None:
    """energon's rule for nested shuffle_over_epochs multipliers: None wins, then -1, else the product."""
    if outer is None or inner is None:
        return None
    if outer == -1 or inner == -1:
        return -1
    return outer * inner


def _draws(sizes: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Blocks drawn uniformly with replacement until they cover `n` positions (shuffle_over_epochs -1)."""
    seq, total = [], 0
    while total < n:
        d = rng.integers(len(sizes), size=len(sizes))
        seq.append(d)
        total += int(sizes[d].sum())
    seq = np.concatenate(seq)
    return seq[: int(np.searchsorted(np.cumsum(sizes[seq]), n, side="left")) + 1]


class EpochOrder:
    """Rows at the positions of one epoch: with `over_epochs` k > 1, of one span of k epochs (k * n positions,
    every block k times, energon's shuffle_over_epochs); -1: n positions of blocks drawn with replacement; None:
    blocks and samples in table order (the shuffle buffer still applies)."""

    def __init__(
        self,
        layout: BlockLayout,
        seed: int,
        epoch: int,
        shuffle_buffer: int = 0,
        shuffle: bool = True,
        over_epochs: int | None = 1,
        in_order: bool = False,
    ):
        self.layout, self.seed, self.epoch, self.in_order = layout, seed, epoch, in_order
        self.shuffle, self.buffer = shuffle, shuffle_buffer if shuffle else 0
        k = int(over_epochs) if shuffle and over_epochs not in (None, -1) else 1
        self.n = layout.n * k
        nb = len(layout.starts)
        self.blocks = shuffle and over_epochs is not None and nb > 0
        if not self.blocks:
            return
        # O(blocks) state: the drawn / permuted block sequence and its cumulative sizes; each block's hash stream
        # (`_inner`) is derived per block when a position needs it
        self.nb, self.k = nb, k
        if over_epochs == -1:
            self.seq = _draws(layout.sizes, layout.n, _rng(seed, epoch, 3))
            self.stream = 3
        else:
            self.seq, self.stream = _rng(seed, epoch).permutation(k * nb), 1
            if k > 1:
                self.cum = np.r_[0, np.cumsum(layout.sizes[self.seq % nb])]
                return
        self.cum = np.r_[0, np.cumsum(layout.sizes[self.seq])]

    def _block(self, j: int) -> tuple[int, int]:
        """(block, hash stream of its inner permutation) at place j of the sequence."""
        b = int(self.seq[j])
        if self.stream == 3:
            return b, self.epoch * 2**24 + j
        return b % self.nb, self.epoch * self.k + b // self.nb

    def _unbuffered(self, pos: np.ndarray) -> np.ndarray:
        if not self.blocks or not len(pos):
            return pos
        j = np.searchsorted(self.cum, pos, side="right") - 1
        off = pos - self.cum[j]
        if self.in_order:  # energon's max_samples_per_sequence=None: a block is read sequentially
            return self.layout.starts[self.seq[j] % self.nb] + off
        # the permutation inside a block: rank `off` among the hashed keys of the block's rows
        out = np.empty(len(pos), np.int64)
        for jj in np.unique(j).tolist():
            m = j == jj
            b, inner = self._block(jj)
            s0, sz = int(self.layout.starts[b]), int(self.layout.sizes[b])
            keys = hash_uniform(self.seed, inner, self.stream, np.arange(s0, s0 + sz))
            out[m] = s0 + np.argsort(keys, kind="stable")[off[m]]
        return out

    def rows_at(self, pos: np.ndarray) -> np.ndarray:
        """Rows at positions `pos` (0 <= pos < self.n) of this epoch."""
        pos = np.asarray(pos, np.int64)
        if self.buffer <= 1 or not len(pos):
            return self._unbuffered(pos)
        n, b = self.n, self.buffer
        lo, hi = max(0, int(pos.min()) - 2 * b), min(n, int(pos.max()) + 2 * b + 1)
        window = np.arange(lo, hi, dtype=np.int64)
        keys = window + hash_uniform(self.seed, self.epoch, 2, window) * b
        ranked = window[np.argsort(keys, kind="stable")]  # exact global ranks lo.. for the inner part
        return self._unbuffered(ranked[pos - lo])


def epoch_order(
    shard_ids: np.ndarray,
    seed: int,
    epoch: int,
    block_size: int = 16,
    shuffle_buffer: int = 0,
    shuffle: bool = True,
    over_epochs: int | None = 1,
) -> np.ndarray:
    """All rows of one epoch (span of epochs) in iteration order (the materialised form of `EpochOrder`)."""
    layout = BlockLayout(np.asarray(shard_ids), block_size)
    order = EpochOrder(layout, seed, epoch, shuffle_buffer, shuffle, over_epochs)
    return order.rows_at(np.arange(order.n, dtype=np.int64))


_ARGS = ("seed", "shuffle_buffer", "shuffle", "over_epochs", "in_order")


class EpochCache:
    """Maps stream positions (epochs concatenated) to table rows, keeping the last two epochs' state."""

    def __init__(
        self,
        layout: BlockLayout,
        seed: int,
        shuffle_buffer: int,
        shuffle: bool,
        over_epochs: int | None = 1,
        in_order: bool = False,
    ):
        self.layout = layout
        k = int(over_epochs) if shuffle and over_epochs not in (None, -1) else 1
        self.n = layout.n * k  # positions of one epoch (one span of k epochs)
        self.args = (seed, shuffle_buffer, shuffle, over_epochs, in_order)
        self._orders: dict[int, EpochOrder] = {}

    def order(self, epoch: int) -> EpochOrder:
        if epoch not in self._orders:
            if len(self._orders) >= 2:
                self._orders.pop(min(self._orders))
            self._orders[epoch] = EpochOrder(self.layout, epoch=epoch, **dict(zip(_ARGS, self.args)))
        return self._orders[epoch]

    def rows_at(self, pos: np.ndarray) -> np.ndarray:
        """Rows at stream positions `pos` (positions beyond one epoch wrap into later epochs)."""
        if self.n == 0:
            return np.zeros(0, np.int64)
        pos = np.asarray(pos, np.int64)
        epochs = pos // self.n
        if len(pos) and epochs.min() == epochs.max():  # the usual case: one epoch
            e = int(epochs[0])
            return self.order(e).rows_at(pos - e * self.n)
        out = np.empty(len(pos), np.int64)
        for e in np.unique(epochs).tolist():
            m = epochs == e
            out[m] = self.order(e).rows_at(pos[m] - e * self.n)
        return out
