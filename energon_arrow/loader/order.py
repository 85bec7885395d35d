"""Epoch order and the global batch plan: pure, vectorised functions of (seed, epoch, batch index).

Order of an epoch: the rows of the effective sample table are cut into blocks of at most `block_size`
consecutive samples of one shard; the blocks are permuted, and the samples inside each block are permuted, so a
batch reads a few contiguous byte ranges per shard. An optional shuffle buffer then displaces every position by
a random amount in [0, shuffle_buffer) (a vectorised stand-in for a streaming shuffle buffer of that size).

Global batch plan: the sample stream is the concatenation of epochs; global batch b covers stream positions
[b*G, (b+1)*G). Rank r of W takes positions [b*G + r*L, b*G + (r+1)*L) with L = G / W, and worker k of K on a rank
produces the batches b with b % K == k. The batch sequence therefore depends only on (seed, G), never on W or K.
"""

from __future__ import annotations

import numpy as np


def _rng(seed: int, epoch: int, stream: int = 0) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64([int(seed) & 0xFFFFFFFF, int(epoch), int(stream)]))


def block_ids(shard_ids: np.ndarray, block_size: int) -> np.ndarray:
    """Block number of every row: a new block starts at each shard change and every `block_size` rows in a shard."""
    n = len(shard_ids)
    if n == 0:
        return np.zeros(0, np.int64)
    starts = np.flatnonzero(np.r_[True, shard_ids[1:] != shard_ids[:-1]])
    run_start = np.repeat(starts, np.diff(np.r_[starts, n]))
    within = np.arange(n, dtype=np.int64) - run_start
    new_block = (within % block_size) == 0
    return np.cumsum(new_block, dtype=np.int64) - 1


def epoch_order(
    shard_ids: np.ndarray,
    seed: int,
    epoch: int,
    block_size: int = 64,
    shuffle_buffer: int = 0,
    shuffle: bool = True,
) -> np.ndarray:
    """Row indices (int64) of one epoch in iteration order. Identity when `shuffle` is False."""
    n = len(shard_ids)
    if not shuffle or n == 0:
        return np.arange(n, dtype=np.int64)
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    blocks = block_ids(np.asarray(shard_ids), block_size)
    rng = _rng(seed, epoch)
    block_rank = rng.permutation(int(blocks[-1]) + 1)[blocks]
    jitter = rng.random(n)
    order = np.lexsort((jitter, block_rank))
    if shuffle_buffer > 1:
        keys = np.arange(n, dtype=np.float64) + rng.random(n) * shuffle_buffer
        order = order[np.argsort(keys, kind="stable")]
    return order.astype(np.int64, copy=False)


def rank_positions(batch: int, global_batch_size: int, rank: int, world_size: int) -> tuple[int, int]:
    """Stream positions [start, end) of rank `rank`'s slice of global batch `batch`."""
    if global_batch_size % world_size:
        raise ValueError(f"global batch size {global_batch_size} is not divisible by world size {world_size}")
    local = global_batch_size // world_size
    start = batch * global_batch_size + rank * local
    return start, start + local


class EpochCache:
    """Maps stream positions to table rows, keeping the orders of the last two epochs computed."""

    def __init__(self, shard_ids: np.ndarray, seed: int, block_size: int, shuffle_buffer: int, shuffle: bool):
        self.shard_ids = shard_ids
        self.n = len(shard_ids)
        self.args = (seed, block_size, shuffle_buffer, shuffle)
        self._orders: dict[int, np.ndarray] = {}

    def order(self, epoch: int) -> np.ndarray:
        if epoch not in self._orders:
            seed, block_size, shuffle_buffer, shuffle = self.args
            if len(self._orders) >= 2:
                self._orders.pop(min(self._orders))
            self._orders[epoch] = epoch_order(
                self.shard_ids, seed, epoch, block_size, shuffle_buffer, shuffle
            )
        return self._orders[epoch]

    def rows_at(self, pos: np.ndarray) -> np.ndarray:
        """Rows at stream positions `pos` (positions beyond one epoch wrap into later epochs)."""
        if self.n == 0:
            return np.zeros(0, np.int64)
        pos = np.asarray(pos, np.int64)
        epochs = pos // self.n
        out = np.empty(len(pos), np.int64)
        for e in np.unique(epochs):
            m = epochs == e
            out[m] = self.order(int(e))[pos[m] - e * self.n]
        return out
