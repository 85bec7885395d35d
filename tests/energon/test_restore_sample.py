"""Loaders' `restore_sample(restore_key)` / `can_restore_sample()`: an item the loader yielded is made again from
its `__restore_key__` (re-read and re-encoded through the task encoder, random hooks reseeded), for the fast
loader (one batch per chunk, regrouped, unbatched) and for pipeline loaders (with workers)."""

from __future__ import annotations

import random

import pytest
import torch

import energon_arrow as ea
from energon_arrow.loader.errors import LoaderError

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


@ea.edataclass
class Noisy(ea.Sample):
    caption: bytes
    noise: float


class Raw(ea.DefaultTaskEncoder):
    decoder = None  # the synthetic shards' images are not real JPEGs


class NoisyTE(ea.DefaultTaskEncoder):
    decoder = None

    @ea.stateless(restore_seeds=True)
    def encode_sample(self, sample):
        return Noisy.derive_from(sample, caption=sample.caption, noise=random.random())


class GroupedTE(NoisyTE):
    def batch_group_criterion(self, sample):
        return int(sample.__key__[-1]) % 2, 3


class GroupedFixed(NoisyTE):
    def batch_group_criterion(self, sample):
        return int(sample.__key__[-1]) % 2, None


class Unmarked(ea.DefaultTaskEncoder):
    decoder = None

    def encode_sample(self, sample):  # not @stateless: energon refuses to restore through it
        return sample


def _same(a, b) -> None:
    assert type(a) is type(b)
    assert a.__restore_key__ == b.__restore_key__
    assert a.__key__ == b.__key__
    for name in ("caption", "noise", "image"):
        if hasattr(a, name):
            x, y = getattr(a, name), getattr(b, name)
            assert torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y


def _items(loader, n: int) -> list:
    it = iter(loader)
    out = [next(it) for _ in range(n)]
    if hasattr(it, "close"):
        it.close()
    return out


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize(
    ("te", "batch_size"),
    [(Raw(), 4), (NoisyTE(), 4), (GroupedTE(), None), (NoisyTE(), None), (GroupedFixed(), 3)],
    ids=["default", "noisy", "grouped-own-size", "unbatched", "grouped-fixed-size"],
)
def test_fast_loader_restores_every_item(prepared_root, te, batch_size, workers):
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=workers)
    ds = ea.get_train_dataset(root := prepared_root, worker_config=wc, batch_size=batch_size, task_encoder=te)
    loader = ea.get_savable_loader(ds)
    assert loader.can_restore_sample()
    items = _items(loader, 7)
    fresh = ea.get_loader(
        ea.get_train_dataset(root, worker_config=wc, batch_size=batch_size, task_encoder=te)
    )
    for item in reversed(items):  # any order, any loader over the same dataset and settings
        assert item.__restore_key__[0] == "BasicLoader"
        _same(fresh.restore_sample(item.__restore_key__), item)


def test_val_loader_restores_batches(prepared_root):
    wc = ea.WorkerConfig(rank=1, world_size=2, num_workers=0)
    loader = ea.get_loader(
        ea.get_val_dataset(prepared_root, worker_config=wc, batch_size=5, task_encoder=Raw())
    )
    batches = list(loader)
    assert len(batches) > 2
    for batch in batches:
        _same(loader.restore_sample(batch.__restore_key__), batch)


def test_fast_loader_refusals(prepared_root):
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
    loader = ea.get_loader(
        ea.get_train_dataset(prepared_root, worker_config=wc, batch_size=2, task_encoder=Raw())
    )
    batch = _items(loader, 1)[0]
    with pytest.raises(LoaderError, match="not a restore key of this loader"):
        loader.restore_sample(batch.__restore_key__[2:])
    stale = ("BasicLoader", "chunk", batch.__restore_key__[2] + 1, *batch.__restore_key__[3:])
    with pytest.raises(LoaderError, match="does not match this dataset"):
        loader.restore_sample(stale)
    unmarked = ea.get_loader(
        ea.get_train_dataset(prepared_root, worker_config=wc, batch_size=2, task_encoder=Unmarked())
    )
    assert not unmarked.can_restore_sample()
    with pytest.raises(LoaderError, match="not @stateless"):
        unmarked.restore_sample(_items(unmarked, 1)[0].__restore_key__)


class FailsWhenRestoring(ea.DefaultTaskEncoder):
    decoder = None
    failing = False

    @ea.stateless
    def encode_sample(self, sample):
        if self.failing:
            raise ValueError("broken on restore")
        return sample


def test_restore_failures_go_to_the_restore_error_handler(prepared_root):
    """As in energon: hooks failing while a sample is re-made go to worker_config.restore_error_handler (default:
    re-raise the error), not to the global handler that skips samples while iterating."""
    seen = []

    def note(exc, sample, sources):
        seen.append(str(exc))

    for handler in (None, note):
        extra = {} if handler is None else {"restore_error_handler": handler}
        wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0, global_error_handler=pytest.fail, **extra)
        te = FailsWhenRestoring()
        loader = ea.get_loader(
            ea.get_train_dataset(prepared_root, worker_config=wc, batch_size=2, task_encoder=te)
        )
        key = _items(loader, 1)[0].__restore_key__
        te.failing = True
        expected = (
            (ValueError, "broken on restore") if handler is None else (LoaderError, "holds no samples|now")
        )
        with pytest.raises(expected[0], match=expected[1]):
            loader.restore_sample(key)
    assert seen == ["broken on restore"] * 2


@ea.stateless(restore_seeds=True)
def _noisy_text(sample):
    return ea.TextSample.derive_from(sample, text=f"{sample.caption.decode()} {random.random()}")


@pytest.mark.parametrize("workers", [0, 2])
def test_pipeline_loader_restores_items_as_their_worker(prepared_root, workers):
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=workers)
    core = ea.get_dataset_from_config(
        prepared_root, split_part="train", training=True, worker_config=wc, decoder=None
    ).build()
    mapped = ea.MapDataset(core, _noisy_text, stateless_map_fn=True, worker_config=wc)
    pipeline = ea.BatchDataset(mapped, 3, ea.generic_batch, batcher_stateless=True, worker_config=wc)
    for get in (ea.get_loader, ea.get_savable_loader):
        loader = get(pipeline)
        assert loader.can_restore_sample()
        batches = _items(loader, 6)
        assert {b.__restore_key__[1] for b in batches} == set(range(max(1, workers)))
        for batch in batches:
            again = loader.restore_sample(batch.__restore_key__)
            assert again.__restore_key__ == batch.__restore_key__
            assert again.__key__ == batch.__key__ and again.text == batch.text
    with pytest.raises(LoaderError, match="not a restore key of this loader"):
        loader.restore_sample(batches[0].__restore_key__[2:])


def test_pipeline_loader_refuses_stateful_map(prepared_root):
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
    core = ea.get_dataset_from_config(
        prepared_root, split_part="val", training=False, worker_config=wc, decoder=None
    ).build()
    loader = ea.get_loader(ea.MapDataset(core, _noisy_text, worker_config=wc))
    assert not loader.can_restore_sample()
    with pytest.raises(ValueError):
        loader.restore_sample(_items(loader, 1)[0].__restore_key__)


@pytest.mark.parametrize("workers", [0, 2])
def test_packed_batches_are_restored(prepared_root, workers):
    from tests.energon.test_packing import PackTE

    class StatelessPackTE(PackTE):
        @ea.stateless
        def preencode_sample(self, sample):
            return super().preencode_sample(sample)

        @ea.stateless
        def postencode_sample(self, sample):
            return super().postencode_sample(sample)

        @ea.stateless
        def batch(self, samples):  # energon's default batching (a batch sample carrying a restore key)
            return ea.DefaultTaskEncoder.batch(self, samples)

    def loader():
        wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=workers)
        ds = ea.get_train_dataset(
            prepared_root,
            worker_config=wc,
            batch_size=3,
            packing_buffer_size=7,
            task_encoder=StatelessPackTE(),
        )
        return ea.get_savable_loader(ds)

    first = loader()
    assert first.can_restore_sample()
    batches = _items(first, 5)
    fresh = loader()
    for batch in reversed(batches):
        assert batch.__restore_key__[:2] == ("BasicLoader", "stream")
        again = fresh.restore_sample(batch.__restore_key__)
        assert (again.__restore_key__, again.__key__, again.keys, again.length) == (
            batch.__restore_key__,
            batch.__key__,
            batch.keys,
            batch.length,
        )
