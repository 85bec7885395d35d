"""stateless / get_stateless, cooker / Cooker, SkipSample and the error handlers, against energon 7.4.1."""

from __future__ import annotations

import logging

import pytest

import energon_arrow as ea
from energon_arrow.samples.stateless import get_failure_tolerance

energon = pytest.importorskip("megatron.energon")
from megatron.energon.task_encoder.base import get_failure_tolerance as ref_failure_tolerance  # noqa: E402
from megatron.energon.task_encoder.base import get_stateless as ref_get_stateless  # noqa: E402


def _marks(mod, **kw):
    def fn(self, sample):
        return sample

    return mod.stateless(fn) if not kw else mod.stateless(**kw)(fn)


@pytest.mark.parametrize("kw", [{}, {"failure_tolerance": 3}, {"failure_tolerance": 0}])
def test_stateless_marks_like_energon(kw):
    ours, ref = _marks(ea, **kw), _marks(energon, **kw)
    assert ea.get_stateless(ours) is ref_get_stateless(ref) is True
    assert get_failure_tolerance(ours, 100) == ref_failure_tolerance(ref, 100)
    assert ours(None, 5) == 5


def test_stateless_restore_seeds_and_plain_functions():
    fn = ea.stateless(restore_seeds=True, failure_tolerance=2)(lambda self, s: s)
    assert ea.get_stateless(fn) and fn.__restore_seeds__ and get_failure_tolerance(fn) == 2
    assert not ea.get_stateless(lambda s: s) and get_failure_tolerance(lambda s: s, None) == 0
    with pytest.raises(ValueError, match="failure_tolerance"):
        ea.stateless(failure_tolerance=-1)(lambda s: s)


def test_cooker_decorator_and_cooker_like_energon():
    def cook(sample, primary=None):
        return sample

    for kw in ({}, {"need_primary": True}, {"need_cache": True, "need_primary": True}):
        ours = ea.Cooker(ea.cooker(**kw)(cook) if kw else ea.cooker(cook))
        ref = energon.Cooker(energon.cooker(**kw)(cook) if kw else energon.cooker(cook))
        assert (ours.need_primary, ours.need_cache) == (ref.need_primary, ref.need_cache)
        assert ours.cook({"a": 1}) == {"a": 1}
    for has, flavors in [(None, {}), ({"a": 1}, {"a": 1, "b": 2}), ({"a": 1}, {"a": 2}), ({"a": 1}, {})]:
        assert ea.Cooker(cook, has_subflavors=has).is_match(flavors) == energon.Cooker(
            cook, has_subflavors=has
        ).is_match(flavors)


def test_need_cache_cooker_needs_a_cache_pool(dataset_copy):
    from energon_arrow.loader.errors import LoaderError
    from tests.loader.conftest import first_batch, write_dataset_yaml

    write_dataset_yaml(dataset_copy, "__module__: megatron.energon\n__class__: CrudeWebdataset\n")

    @ea.cooker(need_cache=True)
    def cook(sample, cache=None):
        return ea.TextSample(**ea.basic_sample_keys(sample), text=sample["txt"])

    class TE(ea.DefaultTaskEncoder):
        cookers = [ea.Cooker(cook)]
        decoder = ea.PartDecoder(handlers={"jpg": bytes})  # the synthetic jpg parts are random bytes

    with pytest.raises(LoaderError, match="need_cache"):
        first_batch(dataset_copy, TE(), shuffle_buffer_size=None, max_samples_per_sequence=None)


def test_need_primary_cooker_gets_the_primary_store(dataset_copy):
    from tests.loader.conftest import first_batch, write_dataset_yaml

    write_dataset_yaml(dataset_copy, "__module__: megatron.energon\n__class__: CrudeWebdataset\n")

    @ea.cooker(need_primary=True)
    def cook(sample, **aux):
        own = aux["primary"].get(sample["__key__"] + ".txt")
        assert aux["primary"].get(".txt") == own  # '.part': a part of the sample being cooked
        return ea.TextSample(**ea.basic_sample_keys(sample), text=own)

    class TE(ea.DefaultTaskEncoder):
        cookers = [ea.Cooker(cook)]
        decoder = ea.PartDecoder(handlers={"jpg": bytes})

    batch = first_batch(dataset_copy, TE(), shuffle_buffer_size=None, max_samples_per_sequence=None)
    assert all(t.startswith("sample ") for t in batch.text)  # decoded with the task encoder's decoder
    TE.decoder = None
    batch = first_batch(dataset_copy, TE(), shuffle_buffer_size=None, max_samples_per_sequence=None)
    assert all(t.startswith(b"sample ") for t in batch.text)  # no decoder: raw payloads


def test_error_handlers(caplog):
    err = ValueError("boom")
    with pytest.raises(ValueError, match="boom"):
        ea.reraise_exception(err, None, None)
    sample = ea.TextSample(__key__="k7", __restore_key__=(), text="t")
    with caplog.at_level(logging.ERROR):
        try:
            raise err
        except ValueError as exc:
            ea.log_exception(exc, sample, ["shard-0.tar/k7.txt"])
    assert "k7" in caplog.text and "shard-0.tar/k7.txt" in caplog.text and "boom" in caplog.text
    assert issubclass(ea.SkipSample, Exception) and not issubclass(ea.SkipSample, ValueError)


class Skipping(ea.DefaultTaskEncoder):
    decoder = None

    @ea.stateless
    def encode_sample(self, sample):
        if int(sample.__key__[-1]) % 2:  # keys end in the sample number: drop the odd ones
            raise ea.SkipSample()
        return sample

    def batch(self, samples):
        if any(s.__key__.endswith("_000004") for s in samples):
            raise ea.SkipSample()  # drop the whole batch
        return super().batch(samples)


def test_skip_sample_drops_samples_and_batches_in_the_loader(prepared_root):
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = ea.get_val_dataset(prepared_root, worker_config=wc, batch_size=4, task_encoder=Skipping())
    keys = [k for b in ea.get_loader(ds) for k in b.__key__]
    assert keys and all(int(k[-1]) % 2 == 0 for k in keys)
    # the batch of samples 4..7 (4 and 6 left after the odd ones were skipped) is dropped as a whole
    assert not any(k.endswith(("_000004", "_000006")) for k in keys) and any(
        k.endswith("_000008") for k in keys
    )
