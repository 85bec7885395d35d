"""Retries against real transient failures injected by a loopback proxy in front of SeaweedFS."""

from __future__ import annotations

import posixpath

import pytest

from energon_arrow.adapters import AccessDenied, NotFound, RetryPolicy, TransientError, open_storage
from energon_arrow.adapters.fetch import fetch_into
from energon_arrow.adapters.receive import ReceiveBuffer, new_mapping
from energon_arrow.testing.seaweedfs import ACCESS_KEY, SECRET_KEY
from tests.processes import run_collecting

pytestmark = pytest.mark.s3

FAST = RetryPolicy(attempts=4, base_delay=0.01, max_delay=0.05)


def through_proxy(proxy, bucket, key, direct=True):
    folder, name = posixpath.split(key)
    store = open_storage(
        f"s3://{bucket}/{folder}",
        {"endpoint_url": proxy.endpoint_url, "key": ACCESS_KEY, "secret": SECRET_KEY},
        retry=FAST,
    )
    store.use_direct_reads = direct
    proxy.reset_counts()
    return store, name


@pytest.mark.parametrize("direct", [True, False], ids=["direct-client", "s3fs"])
@pytest.mark.parametrize("fault", ["slowdown", "error500", "reset"])
def test_transient_failures_are_retried_then_succeed(fault_proxy, s3_object, fault, direct):
    bucket, key, data = s3_object
    store, name = through_proxy(fault_proxy, bucket, key, direct)
    fault_proxy.inject(fault, fault)
    assert store.read_range(name, 100, 50) == data[100:150]
    assert fault_proxy.count("GET") == 3  # two failures, one success: no retries stacked underneath


@pytest.mark.parametrize("direct", [True, False], ids=["direct-client", "s3fs"])
def test_read_ranges_retries_only_the_failed_fetches(fault_proxy, s3_object, direct):
    bucket, key, data = s3_object
    store, name = through_proxy(fault_proxy, bucket, key, direct)
    store.range_gap = 0
    offsets, sizes = [0, 5000, 10000], [10, 10, 10]
    fault_proxy.inject("slowdown")
    got = store.read_ranges(name, offsets, sizes)
    assert [bytes(g) for g in got] == [data[o : o + s] for o, s in zip(offsets, sizes)]
    assert fault_proxy.count("GET") == 4


@pytest.mark.parametrize("direct", [True, False], ids=["direct-client", "s3fs"])
def test_whole_file_reads_and_metadata_are_retried(fault_proxy, s3_object, direct):
    bucket, key, data = s3_object
    store, name = through_proxy(fault_proxy, bucket, key, direct)
    fault_proxy.inject("slowdown")
    assert store.read_bytes(name) == data
    assert fault_proxy.count() == (2 if direct else 3)  # s3fs: HEAD (failed, retried) then GET
    fault_proxy.reset_counts()
    fault_proxy.inject("reset")
    assert store.stat(name).size == len(data)
    assert fault_proxy.count("HEAD") == 2


@pytest.mark.parametrize("direct", [True, False], ids=["direct-client", "s3fs"])
def test_retries_are_bounded(fault_proxy, s3_object, direct):
    bucket, key, _ = s3_object
    store, name = through_proxy(fault_proxy, bucket, key, direct)
    fault_proxy.inject(*["slowdown"] * 10)
    with pytest.raises(TransientError, match=r"obj\.bin.*gave up after 4 attempts") as info:
        store.read_range(name, 0, 10)
    assert key in str(info.value)
    assert fault_proxy.count("GET") == FAST.attempts


def test_stream_retries_blocks(fault_proxy, s3_object):
    bucket, key, data = s3_object
    store, name = through_proxy(fault_proxy, bucket, key)
    fault_proxy.inject("reset")  # the stat (HEAD)
    fault_proxy.inject("slowdown")  # the first block
    with store.open_stream(name, block_size=4096, depth=2) as f:
        assert f.read() == data


@pytest.mark.parametrize("direct", [True, False], ids=["direct-client", "s3fs"])
def test_missing_key_fails_at_once(fault_proxy, s3_object, direct):
    bucket, key, _ = s3_object
    store, _ = through_proxy(fault_proxy, bucket, key, direct)
    with pytest.raises(NotFound, match=r"s3://ea-tests/.*/nope\.bin"):
        store.read_range("nope.bin", 0, 10)
    assert fault_proxy.count() == 1


def test_missing_bucket_fails_at_once(fault_proxy, s3_object):
    store, _ = through_proxy(fault_proxy, "no-such-bucket-ea", "x/y.bin")
    for op in (lambda: store.read_range("y.bin", 0, 10), lambda: store.read_bytes("y.bin")):
        fault_proxy.reset_counts()
        with pytest.raises(NotFound, match=r"s3://no-such-bucket-ea/x/y\.bin"):
            op()
        assert fault_proxy.count() == 1


def test_permission_denied_through_proxy_fails_at_once(s3_iam_server, s3_object):
    from energon_arrow.testing.faultproxy import FaultProxy

    bucket = s3_iam_server.create_bucket("ea-denied")
    s3_iam_server.client().put_object(Bucket=bucket, Key="f.bin", Body=b"x" * 100)
    with FaultProxy(s3_iam_server.endpoint_url) as proxy:
        options = {"endpoint_url": proxy.endpoint_url, "key": ACCESS_KEY, "secret": "wrong-secret-value"}
        store = open_storage(f"s3://{bucket}", options, retry=FAST)
        for direct in (True, False):
            store.use_direct_reads = direct
            proxy.reset_counts()
            with pytest.raises(AccessDenied, match=rf"s3://{bucket}/f\.bin"):
                store.read_range("f.bin", 0, 10)
            assert proxy.count() == 1
        # and the correct secret through the same proxy: signatures survive the proxy
        good = open_storage(f"s3://{bucket}", {**options, "secret": SECRET_KEY})
        assert good.read_range("f.bin", 0, 10) == b"x" * 10


def test_far_skip_fetches_nothing_in_between(fault_proxy, s3_object):
    bucket, key, data = s3_object  # 16 KiB
    store, name = through_proxy(fault_proxy, bucket, key)
    with store.open_stream(name, block_size=2048, depth=2) as f:
        assert f.read(10) == data[:10]
        f.skip(12_000 - 10)
        assert f.read(100) == data[12_000:12_100]
        f.seek(16_000)
        assert f.read() == data[16_000:]
    ranges = [r for m, _, r, _ in fault_proxy.requests if m == "GET"]
    starts = sorted(int(r.split("=")[1].split("-")[0]) for r in ranges)
    assert starts[:2] == [0, 2048] and all(s >= 12_000 for s in starts[2:])


def test_spawned_process_without_the_credentials_falls_back_to_environment(s3_object, s3_server):
    import os
    import pickle
    import subprocess
    import sys

    bucket, key, data = s3_object
    folder, name = posixpath.split(key)
    store = open_storage(f"s3://{bucket}/{folder}", s3_server.storage_options)
    blob = pickle.dumps(store)
    code = (
        "import pickle, sys; s = pickle.loads(sys.stdin.buffer.read()); "
        f"sys.stdout.buffer.write(s.read_range({name!r}, 5, 4))"
    )
    env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
    out = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True, env=env, check=True)
    assert out.stdout == data[5:9]
    assert b"not available here" in out.stderr


def test_metadata_is_fresh_after_another_client_rewrites(s3_server, s3_object):
    bucket, key, data = s3_object
    folder, name = posixpath.split(key)
    store = open_storage(f"s3://{bucket}/{folder}", s3_server.storage_options)
    before = store.scan("*.bin")[0]
    s3_server.client().put_object(Bucket=bucket, Key=key, Body=data + b"more")
    assert store.stat(name).size == len(data) + 4
    assert store.scan("*.bin")[0].identity != before.identity


def _read_in_worker(store, name, queue):
    queue.put(bytes(store.read_ranges(name, [1, 300], [3, 4])[1]) + store.read_range(name, 7, 2))


def test_forked_workers_inherit_credentials_and_build_their_own_clients(s3_server, s3_object):
    import multiprocessing

    bucket, key, data = s3_object
    folder, name = posixpath.split(key)
    store = open_storage(f"s3://{bucket}/{folder}", s3_server.storage_options)
    assert store.read_range(name, 0, 2) == data[:2]  # the parent's client and pool exist before the fork
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_read_in_worker, args=(store, name, queue)) for _ in range(2)]
    results = run_collecting(procs, queue)
    assert results == [data[300:304] + data[7:9]] * 2


def test_libraries_reading_through_fsspec_retry_transient_errors(fault_proxy, s3_object, s3_server):
    """DuckDB and pyarrow read the side index through `Storage.retrying_fs`, not through energon-arrow's retry
    loop: its s3fs instance retries what energon-arrow classifies as transient (found by the fault-injection
    suite: a 500 or a throttling 503 while DuckDB read a side-index Parquet file failed the query)."""
    from energon_arrow.index.prepare import PrepareOptions, prepare_dataset
    from energon_arrow.meta import field_map_dataset, parse_split_ratio
    from energon_arrow.query import open_dataset
    from energon_arrow.testing.synthetic import write_webdataset

    bucket, key, data = s3_object
    store, name = through_proxy(fault_proxy, bucket, key)
    fault_proxy.inject("error500", "error429", "503:ThrottlingException")
    assert store.retrying_fs.cat_file(f"{bucket}/{key}") == data
    assert not fault_proxy._faults  # the three faults were met, and retried

    url = f"s3://{bucket}/{posixpath.dirname(key)}/ds"
    write_webdataset(
        url, shards=2, samples_per_shard=5, image_bytes=10, storage_options=s3_server.storage_options
    )
    options = PrepareOptions(
        split_ratio=parse_split_ratio("1,0,0"),
        dataset_yaml=field_map_dataset("TextSample", {"text": "txt"}),
        num_workers=1,
    )
    prepare_dataset(url, options, s3_server.storage_options)
    proxied = {"endpoint_url": fault_proxy.endpoint_url, "key": ACCESS_KEY, "secret": SECRET_KEY}
    with open_dataset(open_storage(url, proxied, retry=FAST)) as ds:
        fault_proxy.reset_counts()
        fault_proxy.inject("error500", "503:SlowDownRead", "error429")
        assert ds.sql("SELECT count(*) AS n FROM samples").arrow().column("n").to_pylist() == [10]
        assert not fault_proxy._faults  # the three faults were met, and retried


@pytest.mark.parametrize("direct", [True, False], ids=["direct-client", "s3fs"])
def test_a_body_cut_short_is_fetched_again_from_where_it_stopped(fault_proxy, s3_object, direct):
    """fetch_into: the direct client receives the body as it comes, so the retry asks only for the bytes that
    did not arrive; s3fs returns whole bodies only, so its retry asks for the whole range again."""
    bucket, key, data = s3_object
    store, name = through_proxy(fault_proxy, bucket, key, direct)
    fault_proxy.inject("truncate")  # the full Content-Length announced, half the body sent
    sink = ReceiveBuffer(10_000, new_mapping(10_000))  # received in blocks (a window of 1 MiB or more)
    fetch_into(store, name, 1000, sink)
    assert sink.complete and bytes(sink.data[: sink.size]) == data[1000:11_000]
    ranges = [r for method, _, r, _ in fault_proxy.requests if method == "GET"]
    assert ranges == ["bytes=1000-10999", "bytes=6000-10999" if direct else "bytes=1000-10999"]


def test_a_fetch_into_that_gives_up_fails_its_waiters(fault_proxy, s3_object):
    bucket, key, _ = s3_object
    store, name = through_proxy(fault_proxy, bucket, key)
    fault_proxy.inject(*["truncate"] * FAST.attempts)
    sink = ReceiveBuffer(10_000, new_mapping(10_000))
    with pytest.raises(TransientError, match="gave up after 4 attempts"):
        fetch_into(store, name, 0, sink)
    with pytest.raises(TransientError, match="gave up after 4 attempts"):
        sink.wait(sink.size)  # a reader waiting on the window gets the same error
    assert 0 < sink.received < sink.size
