"""energon/train_order.py: the draws equal torch's generator's, and the pure pieces of energon's order."""

from __future__ import annotations

import numpy as np
import torch

from energon_arrow.energon.energon_len import slice_offsets
from energon_arrow.energon.sample_loader import SampleLoader
from energon_arrow.energon.torch_draws import Words, as_floats, first_to_reach
from energon_arrow.energon.train_order import Repeat, ShuffleBuffer
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


def test_excluded_positions_are_drawn_and_skipped_and_the_rest_are_split_rows():
    plain = SampleLoader(0, [0, 4, 9, 15], 1, 2, 7)
    assert plain.begin()
    positions = plain.read(15)
    # excluded samples (positions in energon's index space): the epoch's last one drawn and three more
    gaps = np.unique([0, 4, 5, positions[-1]])
    assert len(gaps) == 4
    skipping = SampleLoader(0, [0, 4, 9, 15], 1, 2, 7, gaps)
    assert skipping.begin()
    kept = positions[~np.isin(positions, gaps)]
    rows = np.concatenate([skipping.read(k) for k in (3, 3, 3, 2)])  # small reads, across the read-ahead
    assert np.array_equal(rows, kept - np.searchsorted(gaps, kept))  # same draws, kept ones as split rows
    assert sorted(rows.tolist()) == list(range(11))
    # the last kept row was given, only an excluded one after it: the next iteration ends the epoch, empty
    assert skipping.begin() is False
    assert skipping.begin() and len(skipping.read(100)) == 11
    assert finite_length([[0, 4, 9, 15]], [1], None, [gaps]) == 11
    assert finite_length([[0, 4, 9, 15]], [1], [1.5], [gaps]) == 11 + 7  # the last pass: floor(15 * 0.5)


def test_split_rows_and_energon_positions_map_both_ways():
    from energon_arrow.loader.split_rows import kept_rows, positions_of, rows_before

    gaps = np.array([0, 4, 5, 14])
    kept = np.setdiff1d(np.arange(16), gaps)
    assert kept_rows(gaps, np.arange(16)).tolist() == list(range(12))
    assert np.array_equal(positions_of(gaps, np.arange(12)), kept)
    assert rows_before(gaps, np.array([0, 1, 4, 6, 15, 16])).tolist() == [0, 0, 3, 3, 11, 12]
    assert kept_rows(np.zeros(0, np.int64), np.array([3, 1])).tolist() == [3, 1]


def test_an_endless_repeat_of_a_worker_with_only_excluded_samples_is_an_error():
    import pytest

    from energon_arrow.loader.errors import LoaderError

    stage = Repeat(SampleLoader(0, [0, 3], 1, 2, 7, np.array([0, 1, 2])), None)
    stage.begin()
    with pytest.raises(LoaderError, match="excluded"):
        stage.read(5)
