"""Nanoset behaviour: cache keying and freshness, bad input, batched reads, loader order and resume."""

from __future__ import annotations

import os

import numpy as np
import pytest

from energon_arrow.tokens.builder import TokenWriter
from energon_arrow.tokens.nanoset import NanosetBuilder, NanosetConfig
from energon_arrow.tokens.nanoset_cache import StaleCacheError
from energon_arrow.tokens.token_loader import NanosetLoader


def _write(prefix, lengths, seed=0, dtype=np.uint16):
    lengths = np.asarray(lengths, np.int64)
    tokens = np.random.default_rng(seed).integers(0, 500, size=int(lengths.sum())).astype(dtype)
    with TokenWriter(prefix, dtype=dtype) as w:
        w.add_documents(tokens, lengths)
        w.finalize()
    return tokens


@pytest.fixture
def data(tmp_path):
    prefix = str(tmp_path / "corpus")
    tokens = _write(prefix, np.random.default_rng(1).integers(0, 90, size=300))
    return prefix, tokens


def _config(prefix, tmp_path, **kw):
    kw.setdefault("cache_dir", str(tmp_path / "cache"))
    return NanosetConfig([prefix], 32, seed=5, split="90,10", create_attention_mask=False, **kw)


def test_samples_are_windows_of_the_shuffled_document_stream(data, tmp_path):
    prefix, tokens = data
    ds = NanosetBuilder(_config(prefix, tmp_path)).build([500])[0]
    lengths = ds.tokens.sequence_lengths.astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    stream = np.concatenate([tokens[starts[d] : starts[d + 1]] for d in ds.document_index.tolist()])
    batch = ds.get_batch(np.arange(len(ds)))
    for k in range(len(ds)):
        j = int(ds.shuffle_index[k])
        want = stream[j * 32 : j * 32 + 33].astype(np.int64)
        assert np.array_equal(batch["tokens"][k].numpy(), want[:-1])
        assert np.array_equal(batch["labels"][k].numpy(), want[1:])


def test_cache_hit_and_key_includes_add_extra_token_and_file_identity(data, tmp_path):
    prefix, _ = data
    first = NanosetBuilder(_config(prefix, tmp_path)).build([100])[0]
    entries = sorted(os.listdir(tmp_path / "cache"))
    again = NanosetBuilder(_config(prefix, tmp_path)).build([100])[0]
    assert sorted(os.listdir(tmp_path / "cache")) == entries  # reused
    assert isinstance(again.indices.sample_index, np.memmap)
    assert np.array_equal(first.sample_index, again.sample_index)
    other = NanosetBuilder(_config(prefix, tmp_path, add_extra_token=False)).build([100])[0]
    assert len(os.listdir(tmp_path / "cache")) > len(entries)  # a different key
    assert not np.array_equal(first.sample_index, other.sample_index)


def test_token_file_changed_after_cache_is_an_error(data, tmp_path):
    prefix, _ = data
    NanosetBuilder(_config(prefix, tmp_path)).build([100])
    _write(prefix, np.random.default_rng(2).integers(1, 90, size=310), seed=3)  # re-tokenised
    with pytest.raises(StaleCacheError, match="changed after"):
        NanosetBuilder(_config(prefix, tmp_path)).build([100])
    rebuilt = NanosetBuilder(_config(prefix, tmp_path, allow_rebuild_on_change=True)).build([100])[0]
    assert len(rebuilt) >= 100 and int(rebuilt.tokens.sequence_lengths.size) == 310


def test_cache_entries_leave_no_temporary_folders(data, tmp_path):
    prefix, _ = data
    NanosetBuilder(_config(prefix, tmp_path)).build([100, 10])
    assert not [n for n in os.listdir(tmp_path / "cache") if ".tmp-" in n]


def test_bad_input(data, tmp_path):
    prefix, _ = data
    with pytest.raises(ValueError, match="too few for one sample"):
        NanosetBuilder(NanosetConfig([prefix], 10**7, cache_dir=str(tmp_path / "c"))).build([10])
    tiny = str(tmp_path / "tiny")
    _write(tiny, [5, 5, 5])
    with pytest.raises(ValueError, match="holds no documents"):
        NanosetBuilder(NanosetConfig([tiny], 2, split="98,1,1", cache_dir=str(tmp_path / "c"))).build(
            [10, 1, 1]
        )
    with pytest.raises(ValueError, match="positive"):
        NanosetConfig([prefix, tiny], 8, weights=[1.0, 0.0])
    with pytest.raises(ValueError, match="positive"):
        NanosetConfig([prefix, tiny], 8, weights=[1.0, -2.0])
    other = str(tmp_path / "wide")
    _write(other, [50, 60, 70], dtype=np.int32)
    with pytest.raises(ValueError, match="share one dtype"):
        NanosetBuilder(NanosetConfig([prefix, other], 8, weights=[1, 1], cache_dir=str(tmp_path / "c")))
    with pytest.raises(ValueError, match="need eod_token"):
        NanosetConfig([prefix], 8, eod_mask_loss=True)


def test_blend_batches_carry_dataset_ids(data, tmp_path):
    prefix, _ = data
    second = str(tmp_path / "second")
    _write(second, np.random.default_rng(4).integers(1, 90, size=200), seed=9)
    cfg = NanosetConfig(
        [prefix, second],
        16,
        weights=[0.3, 0.7],
        split="1",
        create_attention_mask=False,
        cache_dir=str(tmp_path / "cache"),
    )
    blend = NanosetBuilder(cfg).build([400])[0]
    batch = blend.get_batch(np.arange(len(blend)))
    assert np.array_equal(batch["dataset_id"].numpy(), blend.dataset_index)
    k = 7
    inner = blend.datasets[int(blend.dataset_index[k])][int(blend.dataset_sample_index[k])]
    assert np.array_equal(batch["tokens"][k].numpy(), inner["tokens"].numpy())


def test_loader_rank_slicing_and_exact_resume(data, tmp_path):
    prefix, _ = data
    ds = NanosetBuilder(_config(prefix, tmp_path)).build([203])[0]
    ranks = [list(NanosetLoader(ds, 4, data_parallel_rank=r, data_parallel_size=3)) for r in range(3)]
    n = len(ds) // 12  # whole global batches
    assert [len(x) for x in ranks] == [n, n, n]
    got = np.stack([np.concatenate([b["tokens"].numpy() for b in step]) for step in zip(*ranks)])
    full = ds.get_batch(np.arange(n * 12))["tokens"].numpy().reshape(n, 12, 32)
    assert np.array_equal(got, full)
    loader = NanosetLoader(ds, 4, data_parallel_rank=1, data_parallel_size=3)
    it = iter(loader)
    for _ in range(5):
        next(it)
    state = loader.state_dict()
    assert state == {"consumed_samples": 60}
    resumed = NanosetLoader(ds, 4, data_parallel_rank=1, data_parallel_size=3)
    resumed.load_state_dict(state)
    rest = [b["tokens"].numpy() for b in resumed]
    assert len(rest) == n - 5
    assert all(np.array_equal(a, b["tokens"].numpy()) for a, b in zip(rest, ranks[1][5:]))


def test_single_sample_owns_its_shared_fields(data, tmp_path):
    prefix, _ = data
    cfg = NanosetConfig([prefix], 32, seed=5, split="90,10", cache_dir=str(tmp_path / "cache"))
    ds = NanosetBuilder(cfg).build([50])[0]
    for key, blank in (("attention_mask", False), ("position_ids", 0), ("loss_mask", 0.0)):
        first = ds[0][key]
        want = first.clone()
        first.fill_(blank)  # a user editing one sample's field must not change any other sample's
        assert np.array_equal(ds[1][key].numpy(), want.numpy())
        assert np.array_equal(ds.get_batch([2, 3])[key][0].numpy(), want.numpy())


def test_batch_broadcast_fields_are_shared_and_refuse_writes(data, tmp_path):
    prefix, _ = data
    ds = NanosetBuilder(_config(prefix, tmp_path)).build([50])[0]
    batch = ds.get_batch([0, 1, 2])
    assert batch["position_ids"].stride(0) == 0 and batch["loss_mask"].stride(0) == 0
    assert np.array_equal(batch["position_ids"].numpy(), np.tile(np.arange(32), (3, 1)))
    assert np.array_equal(batch["loss_mask"].numpy(), np.ones((3, 32), np.float32))
    with pytest.raises(RuntimeError):
        batch["loss_mask"][:, 0] = 0.0  # torch refuses writes through an expanded tensor


@pytest.mark.parametrize("dtype", [np.uint16, np.int32])
@pytest.mark.parametrize("extra", [True, False])
def test_compiled_gather_equals_the_numpy_gather(tmp_path, monkeypatch, dtype, extra):
    from energon_arrow.tokens import gpt_samples

    assert gpt_samples._native_gather is not None  # built by the install (see test_legacy_shuffle)
    prefix = str(tmp_path / "c")
    _write(prefix, np.random.default_rng(3).integers(0, 70, size=400), dtype=dtype)  # zero-length docs too
    cfg = _config(prefix, tmp_path, add_extra_token=extra, drop_last_partial_validation_sequence=False)
    train, valid = NanosetBuilder(cfg).build([700, None])[:2]
    picks = {ds: np.random.default_rng(0).integers(0, len(ds), size=200) for ds in (train, valid)}
    native = {ds: ds.get_batch(ks) for ds, ks in picks.items()}
    monkeypatch.setattr(gpt_samples, "_native_gather", None)
    for ds, ks in picks.items():
        numpy_path = ds.get_batch(ks)
        for key in ("tokens", "labels", "loss_mask", "position_ids"):
            assert np.array_equal(native[ds][key].numpy(), numpy_path[key].numpy()), key


def test_compiled_gather_refuses_a_corrupt_index(data, tmp_path):
    prefix, _ = data
    ds = NanosetBuilder(_config(prefix, tmp_path)).build([50])[0]
    ds.document_index = ds.document_index.copy()
    ds.document_index[:] = 10**6  # sequence ids past the token file
    with pytest.raises(IndexError):
        ds.get_batch(np.arange(len(ds)))


@pytest.mark.s3
def test_s3_token_files_give_the_same_samples_as_local_ones(data, tmp_path, s3_root):
    from energon_arrow.adapters import open_storage

    prefix, _ = data
    url, options = s3_root
    storage = open_storage(url, options)
    for suffix in (".bin", ".idx"):
        with open(prefix + suffix, "rb") as f:
            storage.write_atomic("corpus" + suffix, f.read())
    local = NanosetBuilder(_config(prefix, tmp_path)).build([200])[0]
    remote_cfg = _config(f"{url}/corpus", tmp_path, storage_options=options)
    remote = NanosetBuilder(remote_cfg).build([200])[0]
    assert remote.tokens.local_tokens is None  # ranged reads through the cache, not the compiled map gather
    for name in ("document_index", "sample_index", "shuffle_index"):
        assert np.array_equal(getattr(local, name), getattr(remote, name))
    ks = np.random.default_rng(0).integers(0, len(local), size=64)
    for key in ("tokens", "labels", "loss_mask", "position_ids"):
        assert np.array_equal(local.get_batch(ks)[key].numpy(), remote.get_batch(ks)[key].numpy())
