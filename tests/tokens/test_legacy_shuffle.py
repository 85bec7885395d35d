"""The compiled shuffle is numpy's legacy RandomState.shuffle, permutation and generator state alike."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.random import RandomState

from energon_arrow.tokens import legacy_shuffle
from energon_arrow.tokens.legacy_shuffle import shuffle


def test_the_compiled_extension_is_built():
    # an install without a C compiler still works (numpy's loop), but this project's installs must build it
    assert legacy_shuffle.NATIVE_AVAILABLE


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int64, np.uint64])
@pytest.mark.parametrize("n", [0, 1, 2, 3, 17, 511, 512, 513, 624, 625, 1025, 4096, 100_003])
def test_same_permutation_and_state_as_numpy(n, dtype):
    for seed in (0, 1234, 2**32 - 1):
        ours, ref = RandomState(seed), RandomState(seed)
        ours.random_sample(5), ref.random_sample(5)  # start mid-block with a cached state position
        got = np.arange(n, dtype=dtype)
        want = got.copy()
        shuffle(ours, got)
        ref.shuffle(want)
        assert np.array_equal(got, want), (n, seed)
        assert np.array_equal(ours.randint(0, 2**31, 8), ref.randint(0, 2**31, 8))  # same state after


def test_consecutive_shuffles_and_views_match_numpy():
    ours, ref = RandomState(7), RandomState(7)
    got = np.tile(np.arange(3000, dtype=np.int32), 3)
    want = got.copy()
    pairs = np.stack([got, got * 2], axis=1).view(np.uint64).reshape(-1)  # 8-byte (id, value) items
    want_pairs = pairs.copy()
    for a, b in ((0, 6000), (6000, 9000)):  # separate head and tail, as a separate final epoch does
        shuffle(ours, got[a:b])
        ref.shuffle(want[a:b])
    assert np.array_equal(got, want)
    shuffle(ours, pairs)
    ref.shuffle(want_pairs)
    assert np.array_equal(pairs, want_pairs)


def test_arrays_the_compiled_loop_does_not_take_go_to_numpy():
    strided = np.arange(40, dtype=np.int64)[::2]
    small = np.arange(30, dtype=np.int16)
    for arr in (strided, small):
        ours, ref = RandomState(3), RandomState(3)
        want = arr.copy()
        shuffle(ours, arr)
        ref.shuffle(want)
        assert np.array_equal(arr, want)
