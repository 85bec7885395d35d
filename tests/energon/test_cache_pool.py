"""Cache pools for cookers' aux reads (energon's FileStoreCachePool / NoCachePool / Lazy): the same data as
direct reads, sources recorded, a bounded on-disk cache whose files go when their Lazy objects do, and
`@cooker(need_cache=True)` cookers receiving the loader's pool in the fast loader (with workers) and in a
task encoder's own pipeline."""

from __future__ import annotations

import gc
import os

import pytest

import energon_arrow as ea
from energon_arrow.loader.errors import LoaderError
from energon_arrow.loader.filestore import open_file_store
from tests.loader.conftest import write_dataset_yaml

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

NAMES = [f"000003_{i:06d}.txt" for i in range(6)]


def _files(pool) -> list:
    return sorted(os.listdir(pool.cache_dir))


def test_file_cache_pool_reads_spills_and_cleans_up(prepared_root, tmp_path):
    store = open_file_store(prepared_root)
    pool = ea.FileStoreCachePool(parent_cache_dir=tmp_path, num_workers=2, max_cache_count=4)
    lazies = [pool.get_lazy(store, n) for n in NAMES]
    sample = ea.TextSample(__key__="k", __restore_key__=(), __sources__=(), text="")
    assert [lz.get(sample) for lz in lazies] == [store.get(n) for n in NAMES]
    assert [s.index for s in sample.__sources__] == NAMES
    assert len(_files(pool)) == 4  # at most max_cache_count spilled; the rest waited in memory
    assert pool.get(store, NAMES[0]) == store.get(NAMES[0])
    del lazies
    gc.collect()
    assert _files(pool) == []  # every cached copy went with its last Lazy
    kept = pool.to_cache(b"payload", "name")
    assert kept.get() == b"payload" and len(_files(pool)) == 1
    # to_cache pickles whatever the pool's method, as energon's does (its test_to_cache caches a tuple in a raw pool)
    assert pool.to_cache((1, "some_data", 2), "tuple").get() == (1, "some_data", 2)
    pickled = ea.FileStoreCachePool(parent_cache_dir=tmp_path, method="pickle")
    assert pickled.to_cache({"a": [1, 2]}, "dict").get() == {"a": [1, 2]}
    folder = pool.cache_dir
    pool.close()
    pickled.close()
    assert not folder.exists()


def test_no_cache_pool_reads_directly(prepared_root):
    store = open_file_store(prepared_root)
    pool = ea.NoCachePool()
    assert pool.get_lazy(store, NAMES[1]).get() == pool.get(store, NAMES[1]) == store.get(NAMES[1])
    assert pool.to_cache([1], "x").get() == [1]


def crude_aux_mds(dataset_copy, prepared_root, tmp_path) -> str:
    """A crude copy of the dataset, in a metadataset whose `aux: media` is the prepared dataset."""
    write_dataset_yaml(dataset_copy, "__module__: megatron.energon\n__class__: CrudeWebdataset\n")
    mds = tmp_path / "mds.yaml"
    mds.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n"
        f"    path: {os.path.relpath(dataset_copy, tmp_path)}\n    aux:\n      media: {prepared_root}\n"
    )
    return str(mds)


@ea.cooker(need_cache=True)
def cook_cached(sample, *, media, cache):
    caption = cache.get_lazy(media, sample["__key__"] + ".txt")
    return ea.TextSample(**ea.basic_sample_keys(sample), text=caption.get(sample).decode().upper())


class CachedTE(ea.DefaultTaskEncoder):
    decoder = None
    cookers = [ea.Cooker(cook_cached)]


class OwnPipeline(CachedTE):
    def build_train_datasets(self, **kwargs):
        return super().build_train_datasets(**kwargs)


@pytest.mark.parametrize("workers", [0, 2])
def test_need_cache_cooker_gets_the_loaders_pool(dataset_copy, prepared_root, tmp_path, workers):
    mds = crude_aux_mds(dataset_copy, prepared_root, tmp_path)
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=workers)
    ds = ea.get_train_dataset(mds, worker_config=wc, batch_size=4, task_encoder=CachedTE())
    with pytest.raises(LoaderError, match="need_cache=True"):
        next(iter(ea.get_loader(ds)))
    pool = ea.FileStoreCachePool(parent_cache_dir=tmp_path / "cache")
    loader = ea.get_savable_loader(ds, cache_pool=pool)
    it = iter(loader)
    batches = [next(it) for _ in range(3)]
    it.close()
    for batch in batches:
        assert all(t.startswith("SAMPLE ") for t in batch.text)
    # the restored batch reads through the pool again
    assert loader.restore_sample(batches[1].__restore_key__).text == batches[1].text
    pool.close()


def test_need_cache_cooker_in_an_own_pipeline(dataset_copy, prepared_root, tmp_path):
    mds = crude_aux_mds(dataset_copy, prepared_root, tmp_path)
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=2)
    ds = ea.get_train_dataset(mds, worker_config=wc, batch_size=4, task_encoder=OwnPipeline())
    loader = ea.get_loader(ds, cache_pool=ea.NoCachePool())
    it = iter(loader)
    batch = next(it)
    assert all(t.startswith("SAMPLE ") for t in batch.text)
    with pytest.raises(LoaderError, match="cache_pool must be a"):
        ea.get_loader(ds, cache_pool="/tmp/cache")


def test_mock_lazy_calls_its_function():
    lazy = ea.MockLazy("a.txt", lambda name: name.upper())
    assert isinstance(lazy, ea.Lazy)
    assert (lazy.fname, lazy.ds, lazy.pool, lazy.get()) == ("a.txt", None, None, "A.TXT")


def test_names_queued_while_the_threads_are_busy_are_read_together(prepared_root, tmp_path, monkeypatch):
    """With its one thread busy, the names a cooker asks for queue up and are then read with one get_many;
    a missing name fails only its own Lazy."""
    import threading

    store = open_file_store(prepared_root)
    calls = []
    real = type(store).get_many
    monkeypatch.setattr(
        type(store), "get_many", lambda self, keys: calls.append(list(keys)) or real(self, keys)
    )
    pool = ea.FileStoreCachePool(parent_cache_dir=tmp_path, num_workers=1)
    busy = threading.Event()
    pool._pool().submit(busy.wait)
    lazies = [pool.get_lazy(store, n) for n in [*NAMES, "no_such_sample.txt"]]
    busy.set()
    assert [lz.get() for lz in lazies[:-1]] == [store.get(n) for n in NAMES]
    with pytest.raises(LoaderError, match="no_such_sample"):
        lazies[-1].get()
    assert calls[0] == [
        *NAMES,
        "no_such_sample.txt",
    ]  # one batch; it failed on the missing name, then per name
    pool.close()


@pytest.mark.s3
def test_part_store_get_many_on_s3_coalesces_reads(prepared_root, s3_server):
    """get_many of neighbouring parts on S3: the same values as one by one locally, in fewer GETs."""
    import uuid

    from energon_arrow.testing.faultproxy import FaultProxy
    from energon_arrow.testing.seaweedfs import ACCESS_KEY, SECRET_KEY
    from energon_arrow.testing.synthetic import write_webdataset
    from tests.loader.conftest import PER_SHARD, SHARDS, prepare

    url = f"s3://{s3_server.create_bucket('ea-tests')}/{uuid.uuid4().hex[:12]}"
    write_webdataset(
        url,
        shards=SHARDS,
        samples_per_shard=PER_SHARD,
        image_bytes=200,
        storage_options=s3_server.storage_options,
    )
    prepare(url, s3_server.storage_options)
    local = open_file_store(prepared_root)
    names = [f"000001_{i:06d}.{p}" for i in range(10) for p in ("txt", "jpg")] + ["000002_000003"]
    with FaultProxy(s3_server.endpoint_url) as proxy:
        remote = open_file_store(
            url, {"endpoint_url": proxy.endpoint_url, "key": ACCESS_KEY, "secret": SECRET_KEY}
        )
        proxy.reset_counts()
        got = remote.get_many(names)
        gets = proxy.count("GET")
    assert [v for v, _ in got] == [local[n][0] for n in names]
    assert [s.index for _, s in got] == names
    assert gets <= 2  # one per shard: the parts of neighbouring samples are one coalesced range
