"""Epoch order: a pure function of (seed, epoch), evaluated lazily for the positions a batch needs.

The rows of the effective sample table are cut into blocks of at most `block_size` consecutive samples of one
shard (energon's slices of `max_samples_per_sequence`). Epoch e visits the blocks in a permuted order and, like
energon's `parallel_shard_iters` (16 in training) slice iterators, interleaves every `PARALLEL_BLOCKS`
consecutive blocks of that order at random: each block's samples come in table order (energon reads a slice
sequentially), the samples of the group's blocks are mixed. A batch therefore reads a few contiguous byte ranges
per shard. An optional shuffle buffer then reorders positions by the key `p + u(p) * shuffle_buffer`
(u uniform in [0, 1)), which moves every sample by less than `shuffle_buffer` positions, like a streaming
shuffle buffer of that size.

With energon's `shuffle_over_epochs` k > 1 an "epoch" here spans k epochs: the block list repeated k times is
permuted as one, so every sample is seen k times in k * n positions; with -1 blocks are drawn with replacement
(each n positions draw fresh blocks; the block crossing the n-th position is cut there); with None blocks and
samples keep table order (the shuffle buffer still applies).

Only O(blocks) state is kept per epoch (the block permutation and its cumulative sizes) plus the interleaved
rows of the last few groups (O(PARALLEL_BLOCKS * block_size)); the interleaving and the buffer keys come from a
counter-based hash of (seed, epoch, position), so any position of any epoch is computed in
O(batch + shuffle_buffer + group) without materialising the epoch. A worker's memory therefore does not grow
with the dataset.
"""

from __future__ import annotations

import numpy as np

#: blocks interleaved together (energon's parallel_shard_iters default in training: 16 slices read at once)
PARALLEL_BLOCKS = 16
_GROUPS_KEPT = 4  # interleaved groups cached per epoch order (a batch, its buffer window and the next batch)

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
    ):
        self.layout, self.seed, self.epoch = layout, seed, epoch
        self.shuffle, self.buffer = shuffle, shuffle_buffer if shuffle else 0
        k = int(over_epochs) if shuffle and over_epochs not in (None, -1) else 1
        self.n = layout.n * k
        nb = len(layout.starts)
        self.blocks = shuffle and over_epochs is not None and nb > 0
        if not self.blocks:
            return
        # O(blocks) state: the drawn / permuted block sequence (entries of a k-epoch span are block + i * nb) and
        # its cumulative sizes; the interleaved rows of a group are computed when a position needs them
        if over_epochs == -1:
            self.seq = _draws(layout.sizes, layout.n, _rng(seed, epoch, 3))
        else:
            self.seq = _rng(seed, epoch).permutation(k * nb) % nb
        self.cum = np.r_[0, np.cumsum(layout.sizes[self.seq])]
        self._groups: dict[int, np.ndarray] = {}

    def _group_rows(self, g: int) -> np.ndarray:
        """Rows at the positions of group g (places g * PARALLEL_BLOCKS.. of the block sequence), interleaved."""
        rows = self._groups.get(g)
        if rows is not None:
            return rows
        places = self.seq[g * PARALLEL_BLOCKS : (g + 1) * PARALLEL_BLOCKS]
        first, last = int(self.cum[g * PARALLEL_BLOCKS]), int(self.cum[g * PARALLEL_BLOCKS + len(places)])
        sizes = self.layout.sizes[places]
        local = np.cumsum(sizes) - sizes  # offset of each place inside the group
        # rows of the group's blocks, block after block, each in table order
        rows = np.repeat(self.layout.starts[places] - local, sizes) + np.arange(last - first, dtype=np.int64)
        if len(places) > 1:
            # a random interleaving that keeps each block's order: hash a key per position, sort the keys inside
            # each block (places are contiguous, so a lexsort by place keeps them there), give the block's i-th
            # sample its i-th smallest key, and read the group in key order
            keys = hash_uniform(self.seed, self.epoch, 4, np.arange(first, last, dtype=np.int64))
            place_of = np.repeat(np.arange(len(places)), sizes)
            keys = keys[np.lexsort((keys, place_of))]
            rows = rows[np.argsort(keys, kind="stable")]
        if len(self._groups) >= _GROUPS_KEPT:
            self._groups.pop(next(iter(self._groups)))
        self._groups[g] = rows
        return rows

    def _unbuffered(self, pos: np.ndarray) -> np.ndarray:
        if not self.blocks or not len(pos):
            return pos
        g = (np.searchsorted(self.cum, pos, side="right") - 1) // PARALLEL_BLOCKS
        starts = self.cum[g * PARALLEL_BLOCKS]
        if g.min() == g.max():  # the usual case: one group
            return self._group_rows(int(g[0]))[pos - starts]
        out = np.empty(len(pos), np.int64)
        for gg in np.unique(g).tolist():
            m = g == gg
            out[m] = self._group_rows(gg)[pos[m] - starts[m]]
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


_ARGS = ("seed", "shuffle_buffer", "shuffle", "over_epochs")


class EpochCache:
    """Maps stream positions (epochs concatenated) to table rows, keeping the last two epochs' state."""

    def __init__(
        self, layout: BlockLayout, seed: int, shuffle_buffer: int, shuffle: bool, over_epochs: int | None = 1
    ):
        self.layout = layout
        k = int(over_epochs) if shuffle and over_epochs not in (None, -1) else 1
        self.n = layout.n * k  # positions of one epoch (one span of k epochs)
        self.args = (seed, shuffle_buffer, shuffle, over_epochs)
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
