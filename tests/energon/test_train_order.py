"""energon/train_order.py: the draws equal torch's generator's, and the pure pieces of energon's order."""

from __future__ import annotations

import numpy as np
import torch

from energon_arrow.energon.train_order import (
    Repeat,
    SampleLoader,
    ShuffleBuffer,
    Words,
    as_floats,
    first_to_reach,
    slice_offsets,
)
from energon_arrow.energon.worker_slices import finite_length


def _torch(seed: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def test_words_give_torchs_rand_randint_and_randperm():
    seed = 3735928559
    w, g = Words(seed), _torch(seed)
    assert np.array_equal(as_floats(w.take(50)), torch.rand(50, generator=g).numpy())
    assert [w.below(7) for _ in range(20)] == [torch.randint(0, 7, (), generator=g).item() for _ in range(20)]
    for n in (1, 2, 10, 1000):
        assert w.permutation(n) == torch.randperm(n, generator=g).tolist()
    # peeking does not consume
    ahead = w.peek(5).copy()
    assert np.array_equal(w.take(5), ahead)


def test_first_to_reach_finds_the_earliest_exhaustion():
    chosen = np.array([0, 1, 0, 2, 1, 0, 1])
    assert first_to_reach(chosen, [3, 5, 0]) == 5  # slot 0's third pick
    assert first_to_reach(chosen, [4, 3, 2]) == 6  # slot 1's third pick; slot 2 is picked once
    assert first_to_reach(chosen, [0, 0, 0]) == len(chosen)


def test_slice_offsets_cut_at_shards_and_sequences():
    bounds = np.array([0, 10, 40])
    assert slice_offsets(5, 50, bounds, None) == [5, 10, 40, 50]
    assert slice_offsets(10, 40, bounds, 10) == [10, 20, 30, 40]
    assert slice_offsets(3, 3, bounds, 10) == [3]  # a worker without samples


def test_an_epoch_yields_each_row_once_and_resumes_a_left_iteration_empty():
    loader = SampleLoader(0, [0, 4, 9, 15], 1, 2, 7)
    assert loader.begin()
    rows = loader.read(15)
    assert sorted(rows.tolist()) == list(range(15))
    assert loader.begin() is False  # left after its last row: the next iteration yields nothing
    assert loader.begin() and len(loader.read(100)) == 15


def test_fractional_repeat_and_shuffle_buffer_keep_the_counts():
    offsets = [0, 5, 10]
    stage = ShuffleBuffer(Repeat(SampleLoader(0, offsets, 1, 2, 3), 1.5), 4, 3)
    stage.begin()
    out = np.concatenate([stage.read(4) for _ in range(6)])
    assert len(out) == 15 == finite_length([offsets], [1], [1.5])
    assert sorted(np.bincount(out, minlength=10).tolist()) == [1] * 5 + [2] * 5
