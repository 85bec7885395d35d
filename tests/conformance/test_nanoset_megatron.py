"""Nanoset vs Megatron-Core GPTDataset / BlendedDataset: identical index arrays and identical samples."""

from __future__ import annotations

import numpy as np
import pytest

from energon_arrow.tokens.gpt_index import split_bounds
from energon_arrow.tokens.nanoset import NanosetBuilder, NanosetConfig
from tests.conformance.nanoset_reference import megatron_datasets, write_tokens

pytestmark = pytest.mark.conformance

VOCAB = 64  # small, so that EOD tokens occur often
EOD = VOCAB  # NullTokenizer(vocab_size=VOCAB).eod


def _random_case(rng, tmp_path, n_datasets):
    prefixes, lengths = [], []
    for d in range(n_datasets):
        n = int(rng.integers(20, 200))
        lens = rng.integers(1, 150, size=n)
        lens[rng.random(n) < 0.1] = 0  # zero-length documents
        prefix = str(tmp_path / f"ds{d}")
        write_tokens(prefix, lens, seed=int(rng.integers(1 << 30)), vocab=VOCAB + 1)
        prefixes.append(prefix)
        lengths.append(lens)
    return prefixes, lengths


def _enough(lengths, split, seq, extra):
    for lens in lengths:
        for b in split_bounds(split, len(lens)):
            if b is not None and int(lens[b[0] : b[1]].sum()) - extra < seq:
                return False  # Megatron loops forever on an empty split; ours raises (tested elsewhere)
    return True


def _compare_samples(ours, ref, ks):
    batch = ours.get_batch(ks)
    for row, k in enumerate(ks.tolist()):
        want = ref[k]
        for key in ("tokens", "labels", "loss_mask", "position_ids"):
            assert np.array_equal(batch[key][row].numpy(), want[key].numpy()), (key, k)
        if "attention_mask" in want:
            assert np.array_equal(batch["attention_mask"][row].numpy(), want["attention_mask"].numpy()), k
        if "dataset_id" in want:
            assert int(batch["dataset_id"][row]) == int(want["dataset_id"])
        single = ours[k]
        assert np.array_equal(single["tokens"].numpy(), want["tokens"].numpy())
        if "attention_mask" in want:
            assert np.array_equal(single["attention_mask"].numpy(), want["attention_mask"].numpy()), k


@pytest.mark.parametrize("case", range(8))
def test_single_dataset_indices_and_samples(tmp_path, case):
    rng = np.random.default_rng(100 + case)
    seq = int(rng.integers(2, 48))
    extra = bool(case % 2)
    split = ["969,30,1", "1", "80,20", "50,25,25"][case % 4]
    prefixes, lengths = _random_case(rng, tmp_path, 1)
    if not _enough(lengths, split, seq, int(extra)):
        split = "1"
    # case 0-3: short runs (1 epoch / few); 4-7: many epochs, some with a separate final epoch
    sizes = [
        int(rng.integers(1, 400)) * (1 if case < 4 else 20),
        int(rng.integers(1, 60)),
        int(rng.integers(1, 30)),
    ]
    seed = int(rng.integers(0, 10_000))
    options = {
        "reset_position_ids": case % 3 == 0,
        "reset_attention_mask": case % 4 == 1,
        "eod_mask_loss": case % 2 == 0,
        "create_attention_mask": case % 4 in (1, 3),  # 3: the plain causal mask (cached, shared)
    }
    ref = megatron_datasets(
        prefixes,
        None,
        sizes,
        sequence_length=seq,
        seed=seed,
        split=split,
        cache=str(tmp_path / "meg"),
        add_extra_token=extra,
        vocab=VOCAB,
        **options,
    )
    config = NanosetConfig(
        prefixes,
        seq,
        seed=seed,
        split=split,
        add_extra_token=extra,
        eod_token=EOD,
        cache_dir=str(tmp_path / "ours"),
        **options,
    )
    ours = NanosetBuilder(config).build(sizes)
    for o, r in zip(ours, ref):
        assert (o is None) == (r is None)
        if o is None:
            continue
        for name in ("document_index", "sample_index", "shuffle_index"):
            a, b = getattr(o, name), getattr(r, name)
            assert a.dtype == b.dtype and np.array_equal(a, b), name
        ks = rng.integers(0, len(o), size=min(len(o), 24))
        _compare_samples(o, r, ks)


@pytest.mark.parametrize("case", range(4))
def test_blend_indices_and_samples(tmp_path, case):
    rng = np.random.default_rng(200 + case)
    n = 2 + case % 2
    prefixes, lengths = _random_case(rng, tmp_path, n)
    seq = int(rng.integers(2, 24))
    split = ["969,30,1", "90,10"][case % 2]
    extra = case != 2
    if not _enough(lengths, split, seq, int(extra)):
        split = "1"
    weights = (rng.random(n) + 0.2).tolist()
    sizes = [int(rng.integers(50, 3000)), int(rng.integers(5, 50)), int(rng.integers(1, 20))]
    ref = megatron_datasets(
        prefixes,
        weights,
        sizes,
        sequence_length=seq,
        seed=7 + case,
        split=split,
        cache=str(tmp_path / "meg"),
        add_extra_token=extra,
        vocab=VOCAB,
    )
    config = NanosetConfig(
        prefixes,
        seq,
        seed=7 + case,
        split=split,
        weights=weights,
        add_extra_token=extra,
        eod_token=EOD,
        create_attention_mask=False,
        cache_dir=str(tmp_path / "ours"),
    )
    ours = NanosetBuilder(config).build(sizes)
    for o, r in zip(ours, ref):
        assert (o is None) == (r is None)
        if o is None:
            continue
        assert (
            np.array_equal(o.dataset_index, r.dataset_index)
            and o.dataset_index.dtype == r.dataset_index.dtype
        )
        assert np.array_equal(o.dataset_sample_index, r.dataset_sample_index)
        for part, ref_part in zip(o.datasets, r.datasets):
            assert np.array_equal(part.shuffle_index, ref_part.shuffle_index)
            assert np.array_equal(part.sample_index, ref_part.sample_index)
        ks = rng.integers(0, len(o), size=min(len(o), 24))
        _compare_samples(o, r, ks)
