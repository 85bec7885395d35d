"""The loader over s3:// (SeaweedFS): the same batches as from local disk, few large GETs, retried faults, and
with the node-local cache a second epoch that sends no request."""

from __future__ import annotations

import os
import re
import uuid

import numpy as np
import pytest

import energon_arrow as ea
from energon_arrow.testing.faultproxy import FaultProxy
from energon_arrow.testing.seaweedfs import ACCESS_KEY, SECRET_KEY
from energon_arrow.testing.synthetic import write_webdataset
from tests.energon_order import global_order_train_dataset
from tests.loader.conftest import PER_SHARD, SHARDS, prepare

pytestmark = pytest.mark.s3

EPOCH = 3 * PER_SHARD  # the train split: 3 shards


class RawTE(ea.DefaultTaskEncoder):
    decoder = None


@pytest.fixture(scope="module")
def s3_dataset(s3_server):
    """The loader conftest's dataset written to and prepared on S3: (url, bucket, prefix)."""
    bucket = s3_server.create_bucket("ea-tests")  # one bucket: the test server has room for few (-volume.max)
    prefix = uuid.uuid4().hex[:12]
    url = f"s3://{bucket}/{prefix}"
    options = s3_server.storage_options
    write_webdataset(
        url, shards=SHARDS, samples_per_shard=PER_SHARD, image_bytes=200, storage_options=options
    )
    prepare(url, options)
    return url


def _batches(root, workers, batches, options=None, **kw):
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=workers)
    ds = global_order_train_dataset(
        root,
        worker_config=wc,
        batch_size=4,
        shuffle_buffer_size=10,
        max_samples_per_sequence=8,
        storage_options=options,
        **{"task_encoder": RawTE(), **kw},
    )
    out = []
    for b in ea.get_loader(ds):
        out.append((list(b.__key__), list(b.image), list(b.caption)))
        if len(out) == batches:
            break
    return out


def _options(endpoint, **extra):
    return {"endpoint_url": endpoint, "key": ACCESS_KEY, "secret": SECRET_KEY, **extra}


@pytest.mark.parametrize("workers", [0, 2])
def test_same_batches_as_local_over_two_epochs(prepared_root, s3_dataset, s3_server, workers):
    n = 2 * EPOCH // 4 + 3
    local = _batches(prepared_root, workers, n)
    remote = _batches(s3_dataset, workers, n, s3_server.storage_options)
    assert remote == local


class PerSampleTE(ea.DefaultTaskEncoder):
    """Builds every sample on its own (a custom encode_sample): the per-sample path over the readers' Spans."""

    decoder = None

    def encode_sample(self, sample):
        return sample


def test_per_sample_path_reads_the_same_bytes_from_shared_windows(prepared_root, s3_dataset, s3_server):
    n = EPOCH // 4 + 2  # with 2 workers, half the windows are the other worker's shared mappings
    local = _batches(prepared_root, 2, n, task_encoder=PerSampleTE())
    remote = _batches(s3_dataset, 2, n, s3_server.storage_options, task_encoder=PerSampleTE())
    assert remote == local and local == _batches(prepared_root, 0, n)


def _range_bytes(requests) -> int:
    total = 0
    for method, _, byte_range, _ in requests:
        m = re.fullmatch(r"bytes=(\d+)-(\d+)", byte_range)
        if method == "GET" and m:
            total += int(m[2]) - int(m[1]) + 1
    return total


def test_few_large_gets_and_no_overread(prepared_root, s3_dataset, s3_server):
    with FaultProxy(s3_server.endpoint_url) as proxy:
        wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
        ds = global_order_train_dataset(
            s3_dataset,
            worker_config=wc,
            batch_size=4,
            max_samples_per_sequence=8,
            task_encoder=RawTE(),
            repeat=False,
            storage_options=_options(proxy.endpoint_url),
        )
        src = ds.sources[0]
        needed = int(src.byte_size.sum())
        proxy.reset_counts()
        batches = list(ea.get_loader(ds))
        assert sum(len(b.__key__) for b in batches) == EPOCH
        gets = [r for r in proxy.requests if r[0] == "GET"]
        # windows of whole blocks (8 samples), several blocks of a shard merged when planned together
        assert len(gets) <= EPOCH // 8
        assert len(gets) < len(batches)
        assert needed <= _range_bytes(gets) <= 1.1 * needed


@pytest.mark.parametrize("workers", [0, 2])
def test_a_rank_of_several_reads_blocks_not_samples(prepared_root, s3_dataset, s3_server, workers):
    """Each block of the training order is spread over the global batches of both ranks, so rank 0 needs about
    half of a block's samples, scattered through it: the gaps between them are merged (merge_gap) instead of
    one GET per one or two samples, and the batches are those read from local disk."""

    def keys(root, options=None):
        wc = ea.WorkerConfig(rank=0, world_size=2, num_workers=workers)
        ds = global_order_train_dataset(
            root, worker_config=wc, batch_size=4, shuffle_buffer_size=10, max_samples_per_sequence=8,
            task_encoder=RawTE(), repeat=False, storage_options=options,
        )  # fmt: skip
        return [list(b.__key__) for b in ea.get_loader(ds)]

    local = keys(prepared_root)
    with FaultProxy(s3_server.endpoint_url) as proxy:
        proxy.reset_counts()
        assert keys(s3_dataset, _options(proxy.endpoint_url)) == local
        gets = [r for r in proxy.requests if r[0] == "GET" and r[1].endswith(".tar")]
    assert sum(len(k) for k in local) == EPOCH // 2
    assert len(gets) <= EPOCH // 8 // 2  # at most one GET per two blocks of 8 (the samples alone: ~EPOCH / 4)


@pytest.mark.parametrize("shuffle_buffer", [0, 10])
def test_two_workers_fetch_every_byte_once(s3_dataset, s3_server, shuffle_buffer):
    """Batches alternate between workers, so each needs part of every block: the workers plan the same windows,
    each window is fetched by one of them and shared through shared memory (nothing is left there after)."""
    before = _share_folders()
    with FaultProxy(s3_server.endpoint_url) as proxy:
        wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=2)
        ds = global_order_train_dataset(
            s3_dataset,
            worker_config=wc,
            batch_size=4,
            max_samples_per_sequence=8,
            shuffle_buffer_size=shuffle_buffer,
            task_encoder=RawTE(),
            repeat=False,
            storage_options=_options(proxy.endpoint_url),
        )
        needed = int(ds.sources[0].byte_size.sum())
        proxy.reset_counts()
        assert sum(len(b.__key__) for b in ea.get_loader(ds)) == EPOCH
        gets = [r for r in proxy.requests if r[0] == "GET"]
        assert needed <= _range_bytes(gets) <= 1.1 * needed
        assert len(gets) <= EPOCH // 8  # about one GET per block of 8 samples, or fewer
    assert _share_folders() == before


def _share_folders() -> set:
    from energon_arrow.loader.window_share import PREFIX, SHM_ROOT

    # this process's loaders only: tests running beside this one (xdist) have their own
    mine = f"{PREFIX}{os.getpid()}-"
    return {n for n in os.listdir(SHM_ROOT) if n.startswith(mine)} if os.path.isdir(SHM_ROOT) else set()


def test_faults_are_retried_and_batches_unchanged(prepared_root, s3_dataset, s3_server):
    local = _batches(prepared_root, 0, 12)
    with FaultProxy(s3_server.endpoint_url) as proxy:
        wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
        ds = global_order_train_dataset(
            s3_dataset,
            worker_config=wc,
            batch_size=4,
            shuffle_buffer_size=10,
            max_samples_per_sequence=8,
            task_encoder=RawTE(),
            storage_options=_options(proxy.endpoint_url),
        )
        proxy.inject("slowdown", "reset", "error500")
        got = []
        for b in ea.get_loader(ds):
            got.append((list(b.__key__), list(b.image), list(b.caption)))
            if len(got) == 12:
                break
        assert sum(1 for r in proxy.requests if r[3] != "forwarded") == 3
    assert got == local


def test_cache_second_epoch_sends_no_request(prepared_root, s3_dataset, s3_server, tmp_path):
    local = _batches(prepared_root, 0, 2 * EPOCH // 4)
    with FaultProxy(s3_server.endpoint_url) as proxy:
        options = _options(proxy.endpoint_url, local_cache=str(tmp_path / "cache"))
        wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
        ds = global_order_train_dataset(
            s3_dataset,
            worker_config=wc,
            batch_size=4,
            shuffle_buffer_size=10,
            max_samples_per_sequence=8,
            task_encoder=RawTE(),
            storage_options=options,
        )
        got = []
        it = iter(ea.get_loader(ds))
        for _ in range(EPOCH // 4):
            b = next(it)
            got.append((list(b.__key__), list(b.image), list(b.caption)))
        first_epoch = proxy.count()
        assert first_epoch > 0
        proxy.reset_counts()
        for _ in range(EPOCH // 4):
            b = next(it)
            got.append((list(b.__key__), list(b.image), list(b.caption)))
        assert proxy.count() == 0
    assert got == local
    assert len(list((tmp_path / "cache").rglob("*.shard"))) == 3
    # the cached copies are the shards
    src = ds.sources[0]
    assert np.all(src.byte_size > 0)


def _savable(root, workers, options=None):
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=workers)
    ds = global_order_train_dataset(
        root,
        worker_config=wc,
        batch_size=4,
        shuffle_buffer_size=10,
        max_samples_per_sequence=8,
        task_encoder=RawTE(),
        storage_options=options,
    )
    return ea.get_savable_loader(ds)


def _take(loader, n):
    it = iter(loader)
    out = [list(next(it).__key__) for _ in range(n)]
    it.close()
    return out


def test_resume_over_s3_matches_local(prepared_root, s3_dataset, s3_server):
    total = 40  # crosses the epoch boundary (30 batches per epoch)
    ref = _take(_savable(prepared_root, 2), total)
    first = _savable(s3_dataset, 2, s3_server.storage_options)
    got = _take(first, 17)
    second = _savable(s3_dataset, 1, s3_server.storage_options)
    second.restore_state_rank(first.save_state_rank())
    got += _take(second, total - 17)
    assert got == ref


def test_a_worker_whose_peer_never_shares_fetches_the_windows_itself(
    prepared_root, s3_dataset, s3_server, tmp_path
):
    """Worker 1 of 2 alone (its peer never publishes): after one wait it fetches every window itself and reads
    the same bytes as from local disk."""
    from energon_arrow.loader.reader import SampleReader, _rows_of
    from energon_arrow.loader.window_reader import BatchFeed, WindowReader
    from energon_arrow.loader.window_share import WindowShare

    def dataset(root, options=None):
        wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
        return global_order_train_dataset(
            root, worker_config=wc, batch_size=4, max_samples_per_sequence=8, shuffle_buffer_size=10,
            task_encoder=RawTE(), repeat=False, storage_options=options,
        )  # fmt: skip

    remote, local = dataset(s3_dataset, s3_server.storage_options), dataset(prepared_root)
    total = remote.total_batches()
    share = WindowShare(str(tmp_path / "share"), 1, 2, wait_s=0.2)
    reader = WindowReader(remote.sources[0], BatchFeed(_rows_of(remote, 0), 0, total, 1, 2, share))
    expected = SampleReader(local.sources[0])
    caches = local._caches()
    try:
        for b in range(1, total, 2):
            rows = local.plan(b, caches)[1]
            assert [bytes(v) for v in reader.read(rows)] == [bytes(v) for v in expected.read(rows)]
    finally:
        reader.close()
        expected.close()
    assert not share.waiting


def test_energon_order_workers_plan_their_own_batches(prepared_root, s3_dataset, s3_server):
    """energon's order: each DataLoader worker reads one energon worker's stream (its own slices of the shards),
    so it plans its windows over its own batches alone (loader/plan_ahead.py): the batches are those read from
    local disk, every byte is fetched about once, and nothing is left in shared memory."""

    def batches(root, options=None):
        wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=2)
        ds = ea.get_train_dataset(
            root, worker_config=wc, batch_size=4, shuffle_buffer_size=10, max_samples_per_sequence=8,
            task_encoder=RawTE(), repeat=False, storage_options=options,
        )  # fmt: skip
        return [(list(b.__key__), list(b.image)) for b in ea.get_loader(ds)], ds

    local, _ = batches(prepared_root)
    before = _share_folders()
    with FaultProxy(s3_server.endpoint_url) as proxy:
        proxy.reset_counts()
        remote, ds = batches(s3_dataset, _options(proxy.endpoint_url))
        gets = [r for r in proxy.requests if r[0] == "GET" and r[1].endswith(".tar")]
    assert remote == local and sum(len(k) for k, _ in local) == EPOCH
    needed = int(ds.sources[0].byte_size.sum())
    assert needed <= _range_bytes(gets) <= 1.1 * needed
    assert _share_folders() == before


def test_energon_order_resume_over_s3_matches_local(prepared_root, s3_dataset, s3_server):
    """energon's order, endless: each worker plans its windows over its own stream from the resumed position on."""

    def savable(root, options=None):
        wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=2)
        ds = ea.get_train_dataset(
            root, worker_config=wc, batch_size=4, shuffle_buffer_size=10, max_samples_per_sequence=8,
            task_encoder=RawTE(), storage_options=options,
        )  # fmt: skip
        return ea.get_savable_loader(ds)

    total = 40  # crosses the epoch boundary (30 batches per epoch)
    ref = _take(savable(prepared_root), total)
    first = savable(s3_dataset, s3_server.storage_options)
    got = _take(first, 17)
    second = savable(s3_dataset, s3_server.storage_options)
    second.restore_state_rank(first.save_state_rank())
    got += _take(second, total - 17)
    assert got == ref
