"""Task encoders: energon's classes and type parameters, the hooks the loader calls and their order, grouping,
generator hooks, unbatched loading, current_batch_index / current_sample_index, exact resume of regrouped
streams whatever the worker count."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

import energon_arrow as ea
from energon_arrow.loader.errors import LoaderError
from tests.energon_order import global_order_train_dataset

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


@ea.edataclass
class Tagged(ea.Sample):
    caption: bytes
    tag: int
    index: int = -1
    batch_index: int = -1


@ea.edataclass
class TaggedBatch(ea.Batch):
    caption: list
    tag: torch.Tensor


class RawTE(ea.DefaultTaskEncoder[ea.CaptioningSample, Tagged, TaggedBatch, TaggedBatch]):
    decoder = None

    def encode_sample(self, sample):
        return Tagged.derive_from(
            sample,
            caption=sample.caption,
            tag=int(sample.__key__[-1]) % 3,
            index=self.current_sample_index,
            batch_index=self.current_batch_index,
        )


class Grouped(RawTE):
    def batch_group_criterion(self, sample):
        return sample.tag, 2 + sample.tag


class Doubling(RawTE):
    def encode_sample(self, sample):  # a generator: two encoded samples per sample
        for copy in range(2):
            yield Tagged.derive_from(sample, caption=sample.caption, tag=copy)


class Typed(RawTE):
    def batch(self, samples):
        return TaggedBatch.from_samples(samples)

    def encode_batch(self, batch):
        return TaggedBatch.derive_from(batch, caption=batch.caption, tag=torch.tensor(batch.tag))


def loader(root, te, batch_size=4, workers=0, repeat=True, **kw):
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=workers, seed_offset=5)
    ds = global_order_train_dataset(
        root,
        worker_config=wc,
        batch_size=batch_size,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        task_encoder=te,
        repeat=repeat,
        **kw,
    )
    return ea.get_savable_loader(ds)


def take(ld, n):
    it = iter(ld)
    out = [next(it) for _ in range(n)]
    it.close()
    return out


def test_subscriptable_like_energon():
    for cls in (ea.TaskEncoder, ea.DefaultTaskEncoder, ea.AugmentTaskEncoder):
        alias = cls[ea.TextSample, ea.TextSample, ea.TextSample, ea.TextSample]
        assert alias.__origin__ is cls

    class Mine(ea.DefaultTaskEncoder[ea.TextSample, ea.TextSample, ea.TextSample, ea.TextSample]):
        pass

    assert isinstance(Mine(), ea.TaskEncoder) and Mine.decoder is ea.TaskEncoder.decoder


def test_default_conversions(prepared_root):
    te = RawTE(batch_type=dict)
    (batch,) = take(loader(prepared_root, te), 1)
    assert isinstance(batch, dict) and len(batch["__key__"]) == 4 and isinstance(batch["tag"], list)


def test_typed_batch_and_encode_batch(prepared_root):
    (batch,) = take(loader(prepared_root, Typed()), 1)
    assert type(batch) is TaggedBatch and batch.tag.shape == (4,) and len(batch.caption) == 4


def test_hooks_run_in_energon_order(prepared_root):
    calls = []

    class Recording(RawTE):
        def preencode_sample(self, sample):
            calls.append("pre")
            return Tagged.derive_from(sample, caption=sample.caption, tag=0)

        def postencode_sample(self, sample):
            calls.append("post")
            return sample

        def batch(self, samples):
            calls.append("batch")
            return super().batch(samples)

        def encode_batch(self, batch):
            calls.append("encode_batch")
            return batch

    Recording.encode_sample = ea.TaskEncoder.encode_sample  # preencode_sample replaces encode_sample
    take(loader(prepared_root, Recording(), batch_size=2), 1)
    assert calls == ["pre", "post", "pre", "post", "batch", "encode_batch"]


def test_preencode_and_encode_sample_together_refused(prepared_root):
    class Both(RawTE):
        def preencode_sample(self, sample):
            return sample

    with pytest.raises(LoaderError, match="both preencode_sample and encode_sample"):
        loader(prepared_root, Both())


def test_current_indices(prepared_root):
    batches = take(loader(prepared_root, RawTE(), batch_size=3), 4)
    for b, batch in enumerate(batches):
        assert list(batch.batch_index) == [b] * 3
        assert list(batch.index) == [3 * b + i for i in range(3)]
    with pytest.raises(LoaderError, match="only while the loader calls"):
        RawTE().current_batch_index  # noqa: B018


@pytest.mark.parametrize("workers", [0, 2])
def test_grouped_batches(prepared_root, workers):
    batches = take(loader(prepared_root, Grouped(), batch_size=None, workers=workers), 20)
    for batch in batches:
        tags = set(batch.tag)
        assert len(tags) == 1 and len(batch.__key__) == 2 + tags.pop()
    ref = take(loader(prepared_root, Grouped(), batch_size=None), 20)
    assert [b.__key__ for b in batches] == [b.__key__ for b in ref]  # independent of the worker count


def test_grouped_finite_epoch_flushes_partial_groups(prepared_root):
    epoch = list(loader(prepared_root, Grouped(), batch_size=None, repeat=False))
    keys = [k for b in epoch for k in b.__key__]
    assert len(keys) == len(set(keys)) == 120  # 3 train shards x 40: every sample once
    sizes = Counter((int(b.tag[0]), len(b.__key__)) for b in epoch)
    assert sum(n for (tag, size), n in sizes.items() if size < 2 + tag) <= 3  # one partial batch per group
    dropped = list(loader(prepared_root, Grouped(), batch_size=None, repeat=False, batch_drop_last=True))
    assert all(len(b.__key__) == 2 + int(b.tag[0]) for b in dropped)


def test_group_batch_size_and_fixed_batch_size_conflict(prepared_root):
    with pytest.raises(LoaderError, match="exactly one of the two must be None"):
        take(loader(prepared_root, Grouped(), batch_size=4), 1)


def test_generator_encode_sample_rebatches(prepared_root):
    batches = take(loader(prepared_root, Doubling(), batch_size=3), 4)
    assert [len(b.__key__) for b in batches] == [3, 3, 3, 3]
    keys = [k for b in batches for k in b.__key__]
    assert keys[0] == keys[1] and keys[2] == keys[3]  # each sample yields two encoded samples


def test_unbatched_yields_samples(prepared_root):
    samples = take(loader(prepared_root, RawTE(), batch_size=None), 5)
    assert all(type(s) is Tagged for s in samples)
    assert [s.index for s in samples] == [0, 1, 2, 3, 4]
    val = ea.get_val_dataset(
        prepared_root,
        worker_config=ea.WorkerConfig(rank=0, world_size=1, num_workers=0),
        batch_size=None,
        task_encoder=RawTE(),
    )
    assert len(val) == len(list(ea.get_loader(val))) == 40


@pytest.mark.parametrize("te,batch_size", [(Grouped(), None), (Doubling(), 3), (RawTE(), None), (Typed(), 5)])
def test_exact_resume_of_regrouped_streams(prepared_root, te, batch_size):
    ref = take(loader(prepared_root, te, batch_size=batch_size), 12)
    first = loader(prepared_root, te, batch_size=batch_size)
    take(first, 5)
    state = first.save_state_rank()
    second = loader(prepared_root, te, batch_size=batch_size, workers=2)
    second.restore_state_rank(state)
    assert [b.__key__ for b in take(second, 7)] == [b.__key__ for b in ref[5:]]


def test_error_handler_and_tolerance(prepared_root):
    seen = []

    class Failing(RawTE):
        @ea.stateless(failure_tolerance=3)
        def encode_sample(self, sample):
            if sample.__key__.endswith("3"):
                raise ValueError("bad sample")
            if sample.__key__.endswith("5"):
                raise ea.SkipSample()
            return super().encode_sample(sample)

    wc = ea.WorkerConfig(
        rank=0, world_size=1, num_workers=0, global_error_handler=lambda e, s, src: seen.append((e, s, src))
    )
    ds = ea.get_val_dataset(prepared_root, worker_config=wc, batch_size=5, task_encoder=Failing())
    keys = [k for b in ea.get_loader(ds) for k in b.__key__]
    assert len(keys) == 32 and not any(k.endswith(("3", "5")) for k in keys)  # 4 failed, 4 skipped
    assert len(seen) == 4 and all(isinstance(e, ValueError) for e, _, _ in seen)
    assert all(s.__key__.endswith("3") and src[0].shard_name.endswith(".tar") for _, s, src in seen)

    class AlwaysFailing(RawTE):
        def encode_sample(self, sample):
            raise ValueError("broken")

    ds = ea.get_val_dataset(
        prepared_root, split_part="train", worker_config=wc, batch_size=5, task_encoder=AlwaysFailing()
    )  # 120 samples
    with pytest.raises(ea.loader.errors.FatalSampleError, match="100 times in a row"):
        list(ea.get_loader(ds))  # energon's default tolerance: 100 failures in a row

    wc.global_error_handler = ea.reraise_exception
    ds = ea.get_val_dataset(prepared_root, worker_config=wc, batch_size=5, task_encoder=AlwaysFailing())
    with pytest.raises(ValueError, match="broken"):
        list(ea.get_loader(ds))


def test_system_exceptions_are_fatal(prepared_root):
    class Broken(RawTE):
        def encode_sample(self, sample):
            return undefined_name  # noqa: F821

    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = ea.get_val_dataset(prepared_root, worker_config=wc, batch_size=5, task_encoder=Broken())
    with pytest.raises(ea.loader.errors.FatalSampleError, match="system exception"):
        list(ea.get_loader(ds))


def test_augment_task_encoder_delegates(prepared_root):
    class Augment(ea.AugmentTaskEncoder):
        def encode_batch(self, batch):
            inner = self._task_encoder.encode_batch(batch)
            return TaggedBatch.derive_from(inner, caption=[], tag=inner.tag + 1)

    te = Augment(Typed())
    assert te.decoder is None
    (batch,) = take(loader(prepared_root, te, batch_size=3), 1)
    (plain,) = take(loader(prepared_root, Typed(), batch_size=3), 1)
    assert batch.__key__ == plain.__key__ and (batch.tag == plain.tag + 1).all() and batch.caption == []


def test_packing_hooks_declared_unused_without_packing_buffer(prepared_root):
    class Packing(RawTE):
        def select_samples_to_pack(self, samples):
            return [samples]

        def pack_selected_samples(self, samples):
            return samples[0]

    (batch,) = take(loader(prepared_root, Packing()), 1)
    assert len(batch.__key__) == 4
    (packed,) = take(
        loader(prepared_root, Packing(), packing_buffer_size=8), 1
    )  # tests/energon/test_packing.py
    assert len(packed.__key__) == 4


def test_get_stateless_and_restore_seeds_mark():
    assert ea.get_stateless(ea.DefaultTaskEncoder.encode_sample)
    assert ea.get_stateless(ea.TaskEncoder.batch) and not ea.get_stateless(
        ea.TaskEncoder.batch_group_criterion
    )


def test_cook_crude_sample_hook(dataset_copy):
    from tests.energon.test_loader_crude import CRUDE_YAML, CrudeTE
    from tests.loader.conftest import write_dataset_yaml

    write_dataset_yaml(dataset_copy, CRUDE_YAML)
    cooked = []

    class Counting(CrudeTE):
        def cook_crude_sample(self, sample, cooker, aux):
            cooked.append((sample["__key__"], self.current_sample_index))
            return super().cook_crude_sample(sample, cooker, aux)

    (batch,) = take(loader(dataset_copy, Counting(), batch_size=3), 1)
    assert type(batch).__name__ == "TextSample" and [k for k, _ in cooked] == batch.__key__
    assert [i for _, i in cooked] == [0, 1, 2]


class Noisy(RawTE):
    @ea.stateless(restore_seeds=True)
    def encode_sample(self, sample):
        return Tagged.derive_from(sample, caption=sample.caption, tag=int(torch.randint(0, 10**9, ())))


def test_augment_keeps_the_wrapped_restore_seeds(prepared_root):
    def tags():
        torch.manual_seed(len(calls))  # a different outer state each time: only the hook's own seeding counts
        calls.append(1)
        return [b.tag for b in take(loader(prepared_root, ea.AugmentTaskEncoder(Noisy())), 2)]

    calls = []
    assert tags() == tags()


class SplittingBatch(RawTE):
    def batch(self, samples):  # a generator batcher: each batch of 4 comes out as two batches of 2
        yield self._batch(samples[:2], Tagged)
        yield self._batch(samples[2:], Tagged)


def test_generator_batch(prepared_root):
    batches = take(loader(prepared_root, SplittingBatch()), 4)
    assert [len(b.__key__) for b in batches] == [2, 2, 2, 2]
    ref = take(loader(prepared_root, RawTE()), 2)
    assert [k for b in batches for k in b.__key__] == [k for b in ref for k in b.__key__]


def test_finite_regrouped_pass_resumes_to_its_end(prepared_root):
    def epoch_loader():
        return loader(prepared_root, Grouped(), batch_size=None, repeat=False)

    ref = [b.__key__ for b in epoch_loader()]
    for cut in (len(ref) - 2, len(ref) - 1, len(ref)):
        first = epoch_loader()
        take(first, cut)
        second = epoch_loader()
        second.restore_state_rank(first.save_state_rank())
        assert [b.__key__ for b in second] == ref[cut:]  # the rest of the pass (partial groups included)
        assert [b.__key__ for b in second] == ref  # then a new pass


def test_val_limit_with_grouping(prepared_root):
    ds = ea.get_val_dataset(
        prepared_root,
        worker_config=ea.WorkerConfig(rank=0, world_size=1, num_workers=0),
        batch_size=None,
        limit=2,
        task_encoder=Grouped(),
    )
    ld = ea.get_loader(ds)
    passes = [[b.__key__ for b in ld] for _ in range(2)]
    assert len(passes[0]) == 2 and passes[0] == passes[1]
