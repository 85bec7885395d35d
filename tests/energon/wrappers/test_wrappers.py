"""Semantics of each wrapper dataset (energon 7.4's), iterated in the main process."""

from __future__ import annotations

import json
import logging

import pytest

import energon_arrow as ea
from energon_arrow.energon.wrappers import FatalSampleError
from tests.energon.wrappers.conftest import TRAIN_KEYS, VAL_KEYS, core, keys_of, take, wc


@pytest.fixture
def val(prepared_root):
    return core(prepared_root, wc(), "val")


@pytest.fixture
def train(prepared_root):
    return core(prepared_root, wc(), "train", training=True, max_samples_per_sequence=4)


def _keys(ds) -> list[str]:
    return [k for item in ds for k in keys_of(item)]


def test_map_applies_and_prefixes_restore_key(val):
    ds = ea.MapDataset(
        val, lambda s: ea.TextSample.derive_from(s, text=s.caption.decode()), worker_config=wc()
    )
    out = list(ds)
    assert [s.__key__ for s in out] == VAL_KEYS
    assert isinstance(out[0], ea.TextSample) and out[0].text.startswith("sample 0")
    assert out[3].__restore_key__ == ("MapDataset", 3, "Webdataset", "shards/shard-000003.tar", 3)
    assert len(ds) == 40


def test_map_generator_skip_and_failures(val, caplog):
    def twice(s):
        yield s
        yield s

    assert _keys(ea.MapDataset(val, twice, worker_config=wc())) == [k for k in VAL_KEYS for _ in range(2)]

    def skip_odd(s):
        if int(s.__key__[-1]) % 2:
            raise ea.SkipSample()
        return s

    assert _keys(ea.MapDataset(val, skip_odd, worker_config=wc())) == VAL_KEYS[::2]

    def fail_some(s):
        if s.__key__.endswith("5"):
            raise ValueError("boom")
        return s

    with caplog.at_level(logging.ERROR):
        got = _keys(ea.MapDataset(val, fail_some, worker_config=wc()))
    assert got == [k for k in VAL_KEYS if not k.endswith("5")]
    assert "boom" in caplog.text

    def always_fail(s):
        raise ValueError("broken")

    with pytest.raises(FatalSampleError, match="3 times in a row"):
        list(ea.MapDataset(val, always_fail, failure_tolerance=3, worker_config=wc()))

    # never handled (energon's contract): the user's FatalSampleError (one class, also `ea.FatalSampleError`),
    # and system exceptions such as a NameError (a bug, not a bad sample)
    def stop(s):
        raise ea.FatalSampleError.from_sample(s, "Critical corruption detected")

    def bug(s):
        raise NameError("name 'x' is not defined")

    with pytest.raises(
        FatalSampleError, match=r"Sample .*000003_0+\d+.* failed: Critical corruption detected"
    ):
        list(ea.MapDataset(val, stop, worker_config=wc()))
    with pytest.raises(FatalSampleError, match="system exception: NameError"):
        list(ea.MapDataset(val, bug, worker_config=wc()))


def test_restore_failures_go_to_the_restore_error_handler(val):
    """energon's contract: a map function failing while a sample is restored goes to restore_error_handler
    (default: re-raise); a handler that returns makes the restored item None."""
    state = {"fail": False}

    def fn(s):
        if state["fail"]:
            raise ValueError("broken on restore")
        return s

    key = next(iter(ea.MapDataset(val, fn, stateless_map_fn=True, worker_config=wc()))).__restore_key__
    state["fail"] = True
    with pytest.raises(ValueError, match="broken on restore"):
        ea.MapDataset(val, fn, stateless_map_fn=True, worker_config=wc()).restore_sample(key)
    seen = []
    config = wc()
    config.restore_error_handler = lambda exc, sample, sources: seen.append((str(exc), sample.__key__))
    assert ea.MapDataset(val, fn, stateless_map_fn=True, worker_config=config).restore_sample(key) is None
    assert seen == [("broken on restore", VAL_KEYS[0])]


def test_filter(val):
    ds = ea.FilterDataset(val, filter_fn=lambda s: s.__key__.endswith("0"), worker_config=wc())
    assert _keys(ds) == [k for k in VAL_KEYS if k.endswith("0")]


def test_iter_map_pairs_and_restores(val):
    def pairs(it):
        buf = []
        for s in it:
            buf.append(s)
            if len(buf) == 2:
                yield ea.TextSample.derive_from(buf[0], text="+".join(x.__key__ for x in buf))
                buf = []

    ds = ea.IterMapDataset(
        val, pairs, len_map_fn=lambda n: n // 2, stateless_iter_fn=True, worker_config=wc()
    )
    out = list(ds)
    assert len(out) == len(ds) == 20
    assert out[1].text == f"{VAL_KEYS[2]}+{VAL_KEYS[3]}"
    assert ds.restore_sample(out[1].__restore_key__).text == out[1].text


def test_batch_sizes_drop_last_and_generator(val):
    ds = ea.BatchDataset(val, 9, ea.generic_batch, worker_config=wc())
    batches = list(ds)
    assert [len(b.__key__) for b in batches] == [9, 9, 9, 9, 4] and len(ds) == 5
    assert _keys(batches) == VAL_KEYS
    dropped = ea.BatchDataset(val, 9, ea.generic_batch, drop_last=True, worker_config=wc())
    assert [len(b.__key__) for b in dropped] == [9, 9, 9, 9] and len(dropped) == 4

    def halves(samples):
        yield ea.generic_batch(samples[:2])
        yield ea.generic_batch(samples[2:])

    gen = ea.BatchDataset(val, 4, halves, batcher_stateless=True, worker_config=wc())
    out = list(gen)
    assert [len(b.__key__) for b in out] == [2] * 20
    assert gen.restore_sample(out[3].__restore_key__).__key__ == out[3].__key__


def test_group_batch(val):
    def group(s):
        return int(s.__key__[-1]) % 2, None

    ds = ea.GroupBatchDataset(val, 4, group, ea.generic_batch, worker_config=wc())
    batches = [b.__key__ for b in ds]
    assert all(len({int(k[-1]) % 2 for k in b}) == 1 for b in batches)
    assert sorted(k for b in batches for k in b) == VAL_KEYS
    sized = ea.GroupBatchDataset(val, None, lambda s: ("all", 6), ea.generic_batch, worker_config=wc())
    assert [len(b.__key__) for b in sized] == [6] * 6 + [4]
    with pytest.raises(FatalSampleError, match="exactly one of them must be None"):
        list(
            ea.GroupBatchDataset(
                val, 4, lambda s: ("x", 3), ea.generic_batch, failure_tolerance=3, worker_config=wc()
            )
        )


def test_blend_finite_and_weighted(prepared_root, val, train):
    head = core(prepared_root, wc(), "val")
    finite = ea.BlendDataset(
        (val, 1.0), (ea.LimitDataset(head, 10, worker_config=wc()), 1.0), worker_config=wc()
    )
    got = _keys(finite)
    assert len(got) == 50 and sorted(got) == sorted(VAL_KEYS + VAL_KEYS[:10])
    assert got != VAL_KEYS + VAL_KEYS[:10]  # interleaved
    assert got[-1].startswith("000003")
    other = core(prepared_root, wc(), "val", training=True)
    weighted = ea.BlendDataset((train, 1.0), (other, 3.0), worker_config=wc())
    drawn = [s.__key__ for s in take(iter(weighted), 400)]
    from_val = sum(k.startswith("000003") for k in drawn)
    assert 240 < from_val < 360  # ~ 3/4
    with pytest.raises(ValueError, match="must be > 0"):
        ea.BlendDataset((val, 0.0), worker_config=wc())


def test_mix_batch(val, prepared_root):
    a = ea.BatchDataset(val, 1, ea.generic_batch, worker_config=wc())
    b = ea.BatchDataset(core(prepared_root, wc(), "val"), 1, ea.generic_batch, worker_config=wc())
    ds = ea.MixBatchDataset(
        (a, 1.0), (b, 1.0), batch_size=4, batch_mix_fn=ea.homogeneous_concat_mix, worker_config=wc()
    )
    out = list(ds)
    assert [len(x.__key__) for x in out] == [4] * 20
    # generic_concat keeps non-tensor fields as the list of the mixed batches' values (as energon does)
    assert sorted(k for x in out for part in x.__key__ for k in part) == sorted(VAL_KEYS * 2)


def test_concat(val, prepared_root):
    head = ea.LimitDataset(core(prepared_root, wc(), "val"), 5, worker_config=wc())
    ds = ea.ConcatDataset(val, head, worker_config=wc())
    assert _keys(ds) == VAL_KEYS + VAL_KEYS[:5]
    assert len(ds) == 45


def test_repeat(prepared_root, val):
    assert _keys(ea.RepeatDataset(val, repeats=2, worker_config=wc())) == VAL_KEYS * 2
    half = ea.RepeatDataset(core(prepared_root, wc()), repeats=1.5, worker_config=wc())
    assert _keys(half) == VAL_KEYS + VAL_KEYS[:20] and len(half) == 60
    forever = ea.RepeatDataset(core(prepared_root, wc()), worker_config=wc())
    assert [s.__key__ for s in take(iter(forever), 100)] == (VAL_KEYS * 3)[:100]


def test_limit_restarts_each_epoch(val):
    ds = ea.LimitDataset(val, 10, worker_config=wc())
    assert _keys(ds) == VAL_KEYS[:10]
    assert _keys(ds) == VAL_KEYS[:10]
    assert len(ds) == 10
    assert len(ea.LimitDataset(val, 100, worker_config=wc())) == 40


def test_epochize_continues_the_inner_stream(val):
    ds = ea.EpochizeDataset(val, 15, worker_config=wc())
    e1, e2, e3 = _keys(ds), _keys(ds), _keys(ds)
    assert e1 == VAL_KEYS[:15] and e2 == VAL_KEYS[15:30]
    assert e3 == VAL_KEYS[30:]  # the inner dataset ends inside the epoch
    assert _keys(ds) == VAL_KEYS[:15]
    assert len(ds) == 15


def test_shuffle_buffer(val):
    got = _keys(ea.ShuffleBufferDataset(val, 10, worker_config=wc()))
    assert sorted(got) == VAL_KEYS and got != VAL_KEYS
    # a sample moves at most size - 1 places forward
    assert all(VAL_KEYS.index(k) <= i + 9 for i, k in enumerate(got))


@pytest.mark.heavy
def test_log_sample_and_gc(val, tmp_path):
    """LogSampleDataset writes energon's `yield_batch` records to the worker debug log (file 0: the main process)."""
    config = ea.WorkerConfig(
        rank=0,
        world_size=1,
        num_workers=0,
        worker_log_level=1,
        worker_debug_path=str(tmp_path / "{worker_id}.jsonl"),
    )
    ds = ea.LogSampleDataset(ea.GcDataset(val, worker_config=wc(), every_n_iter=5), "train", config)
    assert _keys(ds) == VAL_KEYS
    lines = [json.loads(x) for x in (tmp_path / "0.jsonl").read_text().splitlines()]
    assert lines[-1] == {"t": "yield_batch", "r": 0, "w": 0, "m": "train", "idx": 39, "keys": [VAL_KEYS[-1]]}
    assert len(lines) == len(VAL_KEYS)


def test_worker_config_must_match(val):
    with pytest.raises(ValueError, match="worker_config"):
        ea.MapDataset(val, lambda s: s, worker_config=wc(2))


def test_train_pipeline_keys(train):
    ds = ea.BatchDataset(
        ea.MapDataset(train, lambda s: s, worker_config=wc()), 10, ea.generic_batch, worker_config=wc()
    )
    first_epoch = [k for b in take(iter(ds), 12) for k in b.__key__]
    assert sorted(first_epoch) == TRAIN_KEYS
