"""energon's cache-pool example: a `@cooker(need_cache=True)` cooker returns samples with `Lazy` fields and the
packing hooks (run by the loader's main process) call `.get()` on them. With DataLoader workers the samples cross
from a worker to the main process: the Lazy carries its data across, and a sample that cannot be sent is a clear
error naming it, never a hang."""

from __future__ import annotations

import pytest

import energon_arrow as ea
from tests.energon.test_cache_pool import crude_aux_mds
from tests.processes import call_within

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

TIMEOUT_S = 60


@ea.edataclass
class LazyCaptionSample(ea.Sample):
    caption: ea.Lazy[bytes]


@ea.cooker(need_cache=True)
def cook_lazy(sample, *, media, cache):
    return LazyCaptionSample(
        **ea.basic_sample_keys(sample), caption=cache.get_lazy(media, sample["__key__"] + ".txt")
    )


class PackingLazyTE(ea.DefaultTaskEncoder):
    decoder = None
    cookers = [ea.Cooker(cook_lazy)]

    def select_samples_to_pack(self, samples):
        return [[s] for s in samples]

    @ea.stateless
    def pack_selected_samples(self, samples):
        (sample,) = samples
        return ea.TextSample.derive_from(sample, text=sample.caption.get(sample).decode().upper())


@ea.cooker(need_cache=True)
def cook_unpicklable(sample, *, media, cache):
    lazy = ea.MockLazy(sample["__key__"], lambda name: name)  # a lambda: cannot leave the worker
    return LazyCaptionSample(**ea.basic_sample_keys(sample), caption=lazy)


class UnpicklableTE(PackingLazyTE):
    cookers = [ea.Cooker(cook_unpicklable)]


def _first_batches(loader, n: int) -> list:
    """`n` batches of `loader`, failing (not hanging) when they do not come within TIMEOUT_S."""

    def take():
        it = iter(loader)
        try:
            return [next(it) for _ in range(n)]
        finally:
            it.close()

    return call_within(take, TIMEOUT_S, "the loader's first batches")


@pytest.mark.parametrize("pool_kind", ["file", "none"])
@pytest.mark.parametrize("workers", [0, 2])
def test_lazy_fields_resolved_in_the_packing_hooks(dataset_copy, prepared_root, tmp_path, workers, pool_kind):
    mds = crude_aux_mds(dataset_copy, prepared_root, tmp_path)
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=workers)
    ds = ea.get_train_dataset(
        mds, worker_config=wc, batch_size=2, task_encoder=PackingLazyTE(), packing_buffer_size=2
    )
    if pool_kind == "file":
        pool = ea.FileStoreCachePool(parent_cache_dir=tmp_path / "cache", num_workers=1)
    else:
        pool = ea.NoCachePool()
    loader = ea.get_savable_loader(ds, cache_pool=pool)
    batches = _first_batches(loader, 4)
    for batch in batches:
        assert len(batch.text) == 2
        for key, text in zip(batch.__key__, batch.text):
            shard, index = key.rsplit("/", 1)[-1].split("_")
            assert text.startswith(f"SAMPLE {int(index)} OF SHARD {int(shard)}: A PHOTO OF THING"), (
                key,
                text,
            )
    pool.close()


def test_a_sample_a_worker_cannot_send_is_a_clear_error(dataset_copy, prepared_root, tmp_path):
    mds = crude_aux_mds(dataset_copy, prepared_root, tmp_path)
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=2)
    ds = ea.get_train_dataset(
        mds, worker_config=wc, batch_size=2, task_encoder=UnpicklableTE(), packing_buffer_size=2
    )
    loader = ea.get_savable_loader(ds, cache_pool=ea.NoCachePool())
    with pytest.raises(Exception, match="cannot be sent to the main process"):
        _first_batches(loader, 1)
