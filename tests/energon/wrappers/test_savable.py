"""get_savable_loader over composed pipelines: a run saved mid-epoch and restored into a fresh pipeline continues
exactly like the uninterrupted run, with 0 and 2 DataLoader workers."""

from __future__ import annotations

import dataclasses
import json

import pytest

import energon_arrow as ea
from energon_arrow.loader.errors import LoaderError
from tests.energon.wrappers.conftest import VAL_KEYS, core, keys_of, take, wc


def _same(s):
    return s


def _twice(s):
    # copies: restore keys are set on the yielded object (as in energon)
    yield dataclasses.replace(s)
    yield dataclasses.replace(s)


def _parity(s):
    return int(s.__key__[-1]) % 2, None


def _pairs(it):
    buf = []
    for s in it:
        buf.append(s)
        if len(buf) == 2:
            yield ea.generic_batch(buf)
            buf = []


def _shuffled_batches(root, c):
    ds = core(root, c, "train", training=True, max_samples_per_sequence=5)
    ds = ea.MapDataset(ds, _same, stateless_map_fn=True, worker_config=c)
    ds = ea.ShuffleBufferDataset(ds, 7, worker_config=c)
    return ea.BatchDataset(ds, 3, ea.generic_batch, worker_config=c)


def _blend(root, c):
    a = core(root, c, "train", training=True)
    b = ea.RepeatDataset(core(root, c, "val"), worker_config=c)
    return ea.BatchDataset(
        ea.BlendDataset((a, 1.0), (b, 2.0), worker_config=c), 4, ea.generic_batch, worker_config=c
    )


def _repeat_limit_val(root, c):
    ds = ea.LimitDataset(
        ea.RepeatDataset(core(root, c, "val"), repeats=2, worker_config=c), 50, worker_config=c
    )
    return ea.BatchDataset(ds, 4, ea.generic_batch, worker_config=c)


def _generator_groups(root, c):
    ds = ea.MapDataset(core(root, c, "train", training=True), _twice, stateless_map_fn=True, worker_config=c)
    return ea.GroupBatchDataset(ds, 3, _parity, ea.generic_batch, worker_config=c)


def _epochized(root, c):
    ds = ea.EpochizeDataset(
        core(root, c, "train", training=True, max_samples_per_sequence=3), 22, worker_config=c
    )
    return ea.BatchDataset(ds, 4, ea.generic_batch, worker_config=c)


def _iter_map_filter(root, c):
    ds = ea.FilterDataset(core(root, c, "val"), filter_fn=lambda s: s.__key__[-1] != "7", worker_config=c)
    ds = ea.IterMapDataset(ds, _pairs, stateless_iter_fn=True, worker_config=c)
    return ea.ConcatDataset(ds, core(root, c, "val"), worker_config=c)


PIPELINES = {
    "map-shuffle-batch": _shuffled_batches,
    "blend-batch": _blend,
    "repeat-limit-val": _repeat_limit_val,
    "generator-groups": _generator_groups,
    "epochize": _epochized,
    "itermap-filter-concat": _iter_map_filter,
}


def _stream(loader):
    """Items of the loader over as many epochs as asked for (finite pipelines start a new epoch)."""
    while True:
        empty = True
        for item in loader:
            empty = False
            yield item
        if empty:
            return


def _take_keys(it, n: int) -> list:
    return [tuple(keys_of(next(it))) for _ in range(n)]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_restore_mid_epoch_equals_uninterrupted(prepared_root, name, workers):
    build = PIPELINES[name]
    total, cut = 40, 17
    full = _take_keys(_stream(ea.get_savable_loader(build(prepared_root, wc(workers)))), total)
    loader = ea.get_savable_loader(build(prepared_root, wc(workers)))
    it = _stream(loader)
    first = _take_keys(it, cut)
    state = loader.save_state_rank()
    state = json.loads(json.dumps(state))  # plain data: survives a JSON round trip
    resumed = ea.get_savable_loader(build(prepared_root, wc(workers)))
    resumed.restore_state_rank(state)
    assert resumed.save_state_rank() == state  # not started yet: the restored state is the state
    rest = _take_keys(_stream(resumed), total - cut)
    assert first + rest == full


def test_state_checks(prepared_root):
    # (main-process loaders only: a worker-count mismatch needs no running workers)
    loader = ea.get_savable_loader(_repeat_limit_val(prepared_root, wc(0)))
    it = iter(loader)
    next(it)
    state = loader.save_state_rank()
    with pytest.raises(LoaderError, match="before the loader is iterated"):
        loader.restore_state_rank(state)
    two_workers = ea.get_savable_loader(_repeat_limit_val(prepared_root, wc(2)))
    with pytest.raises(LoaderError, match="1 worker"):
        two_workers.restore_state_rank(state)
    bad = ea.get_savable_loader(_shuffled_batches(prepared_root, wc(0)))
    with pytest.raises(LoaderError, match="micro batch size 4"):
        bad.restore_state_rank(state)
    wrong = ea.get_savable_loader(ea.MapDataset(core(prepared_root, wc(0)), _same, worker_config=wc(0)))
    wrong._micro_batch_size = lambda: 4
    wrong.restore_state_rank(state)
    with pytest.raises(ValueError, match="cannot be restored into SampleDataset"):
        next(iter(wrong))


@pytest.mark.parametrize("workers", [0, 2])
def test_loader_len_and_epochs(prepared_root, workers):
    c = wc(workers)
    loader = ea.get_loader(ea.BatchDataset(core(prepared_root, c), 4, ea.generic_batch, worker_config=c))
    assert len(loader) == 10
    for _ in range(2):
        keys = sorted(k for b in loader for k in b.__key__)
        assert keys == VAL_KEYS


def test_loader_refuses_cache_pool(prepared_root):
    with pytest.raises(LoaderError, match="cache_pool"):
        ea.get_savable_loader(core(prepared_root, wc()), cache_pool=object())


@ea.stateless(restore_seeds=True)
def _augment(s):
    import random

    return ea.TextSample.derive_from(s, text=f"{s.__key__}:{random.random():.12f}")


def _random_map(root, c):
    ds = ea.MapDataset(
        core(root, c, "train", training=True), _augment, stateless_map_fn=True, worker_config=c
    )
    return ea.BatchDataset(
        ea.ShuffleBufferDataset(ds, 5, worker_config=c), 2, ea.generic_batch, worker_config=c
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_restore_seeds_reproduce_random_maps(prepared_root, workers):
    full = [b.text for b in take(iter(ea.get_savable_loader(_random_map(prepared_root, wc(workers)))), 12)]
    loader = ea.get_savable_loader(_random_map(prepared_root, wc(workers)))
    it = iter(loader)
    first = [b.text for b in take(it, 5)]
    state = loader.save_state_rank()
    resumed = ea.get_savable_loader(_random_map(prepared_root, wc(workers)))
    resumed.restore_state_rank(state)
    rest = [b.text for b in take(iter(resumed), 7)]
    assert first + rest == full  # the shuffle buffer's samples were re-read and re-augmented identically
    assert len({t.split(":")[1] for b in full for t in b}) == 24
