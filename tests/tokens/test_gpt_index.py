"""GPT index arithmetic on small hand-checked inputs (the Megatron conformance tests cover random ones)."""

from __future__ import annotations

import numpy as np

from energon_arrow.tokens.gpt_index import (
    build_gpt_indices,
    num_epochs,
    sample_index,
    separate_final_epoch,
    split_bounds,
)


def test_split_bounds_are_contiguous_and_rounded():
    assert split_bounds("969,30,1", 1000) == [(0, 969), (969, 999), (999, 1000)]
    assert split_bounds("1", 10) == [(0, 10), None, None]
    assert split_bounds("80,20", 7) == [(0, 6), (6, 7), None]


def test_epochs_and_separate_final_epoch_rule():
    assert num_epochs(100, None, 10, 1) == 1
    assert num_epochs(100, 9, 10, 1) == 1  # 91 tokens needed
    assert num_epochs(100, 10, 10, 1) == 2  # 101 tokens needed
    # 3 epochs, the last contributes 1 sample of 9 per epoch: shuffled on its own
    assert separate_final_epoch(100, 3, 20, 10, 1)
    assert not separate_final_epoch(100, 3, 27, 10, 1)


def test_sample_boundaries_skip_zero_length_documents():
    lengths = np.array([5, 0, 7, 0, 4], np.int32)  # in document-index order
    # stream: d0 [0,5) d2 [5,12) d4 [12,16); L=4, extra=1: boundaries at 4, 8, 12 need tokens up to 5, 9, 13
    got = sample_index(lengths, 4, 16, 1)
    assert got.tolist() == [[0, 0], [0, 4], [2, 3], [4, 0]]
    # without the extra token a boundary at a document end stays in that document
    got = sample_index(lengths, 4, 16, 0)
    assert got.tolist() == [[0, 0], [0, 4], [2, 3], [2, 7], [4, 4]]


def test_partial_tail_sample_is_clamped_when_kept():
    got = sample_index(np.array([10], np.int32), 4, 10, 1, drop_last=False)
    assert got.tolist() == [[0, 0], [0, 4], [0, 8], [0, 9]]


def test_one_random_state_drives_both_shuffles():
    sizes = np.full(50, 9, np.int32)
    idx = build_gpt_indices(sizes, np.arange(50, dtype=np.int32), 50, 8, seed=3)  # one epoch
    rs = np.random.RandomState(3)
    docs = np.tile(np.arange(50, dtype=np.int32), idx.num_epochs)
    rs.shuffle(docs)
    assert np.array_equal(idx.document_index, docs)
    assert idx.shuffle_index.dtype == np.uint32 and idx.sample_index.dtype == np.int32
    assert sorted(idx.shuffle_index.tolist()) == list(range(len(idx)))
    assert np.array_equal(idx.shuffle_index, _shuffled(rs, len(idx)))


def _shuffled(rs, n):
    out = np.arange(n, dtype=np.uint32)
    rs.shuffle(out)
    return out


def test_compiled_sample_index_equals_the_numpy_one(monkeypatch):
    from energon_arrow.tokens import gpt_index

    assert gpt_index._native_boundaries is not None  # built by the install
    rng = np.random.default_rng(4)
    for trial in range(30):
        lengths = rng.integers(0, 40, size=int(rng.integers(1, 3000))).astype(np.int32)
        lengths[rng.random(lengths.size) < 0.2] = 0  # zero-length documents never hold a boundary
        if trial % 3 == 0:  # a strided view, as the (id, length) pairs hand it over
            lengths = np.stack([np.zeros_like(lengths), lengths], axis=1)[:, 1]
        total = int(lengths.sum())
        seq, extra, drop = int(rng.integers(1, 50)), int(trial % 2), bool(trial % 4 < 2)
        if total - extra < seq:
            continue
        got = sample_index(lengths, seq, total, extra, drop)
        with monkeypatch.context() as m:
            m.setattr(gpt_index, "_native_boundaries", None)
            want = sample_index(lengths, seq, total, extra, drop)
        assert got.dtype == want.dtype and np.array_equal(got, want), trial
