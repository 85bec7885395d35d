"""Integrity and outages through the FaultProxy in front of SeaweedFS: PUT bodies damaged on the way (20% of the
requests of a prepare) never leave a damaged file behind (every published file is byte-for-byte the one a
fault-free prepare writes), and a 503 outage shorter than `retry_deadline_s` is waited out by prepare and by a
loader epoch, while a shorter deadline ends in one clear error naming the URL, the operation and the attempts."""

from __future__ import annotations

import uuid

import pytest

from energon_arrow.adapters import StorageError, open_storage
from energon_arrow.testing.s3_faults import (
    outage_after_first_request,
    prepare,
    published,
    strip_to_shards,
    through,
)
from energon_arrow.testing.synthetic import write_webdataset
from tests.reliability.test_s3_faults import loader_keys

pytestmark = pytest.mark.s3

OUTAGE_S = 3.0


@pytest.fixture
def root(s3_server):
    bucket = s3_server.create_bucket("ea-integrity")
    return f"s3://{bucket}/{uuid.uuid4().hex[:12]}"


@pytest.mark.parametrize("seed", [11, 12])
def test_prepare_with_damaged_uploads_writes_the_same_files(proxy, root, s3_server, seed):
    """The reference is a fault-free prepare of the same shards (their mtimes are in the side index: shards written
    twice a second apart would differ); everything but the shards is removed before the damaged run, so a file it
    failed to write cannot pass for one the reference left. Besides the random 20%, the first PUT of `.info.json`
    is always damaged (at 20% alone, none of the ~15 PUT bodies was damaged in 1 run of 24); 12 tries per request
    (a run of faults that ends the prepare with a clear error is allowed, but not what this test is about)."""
    direct = s3_server.storage_options
    write_webdataset(root, shards=6, samples_per_shard=20, image_bytes=100, storage_options=direct)
    prepare(root, direct)
    reference = published(root, direct)
    strip_to_shards(root, direct)
    proxy.reset_counts()
    proxy.inject_for(".nv-meta/.info.json", "corrupt_request")
    proxy.randomize(0.2, ("corrupt_request",), seed=seed)  # a PUT body damaged, other requests 503
    try:
        prepare(root, {**through(proxy), "retries": 12})
        damaged = proxy.faulted().get("corrupt_request", 0)
    finally:
        proxy.reset_counts()
    assert damaged > 0
    assert published(root, direct) == reference


def test_prepare_waits_out_an_outage_shorter_than_the_deadline(proxy, root, s3_server):
    direct = s3_server.storage_options
    write_webdataset(root, shards=4, samples_per_shard=10, image_bytes=50, storage_options=direct)
    thread = outage_after_first_request(proxy, OUTAGE_S)
    prepare(root, {**through(proxy), "retry_deadline_s": OUTAGE_S * 4})
    thread.join()
    assert proxy.faulted().get("outage", 0) > 0
    proxy.reset_counts()
    assert open_storage(root, direct).exists(".nv-meta/index.sqlite")


def test_prepare_with_a_deadline_shorter_than_the_outage_is_a_clear_error(proxy, root, s3_server):
    direct = s3_server.storage_options
    write_webdataset(root, shards=2, samples_per_shard=5, image_bytes=50, storage_options=direct)
    thread = outage_after_first_request(proxy, OUTAGE_S * 3)
    options = {**through(proxy), "retries": 1, "retry_deadline_s": 0.5}
    with pytest.raises(
        StorageError, match=r"s3://\S+: [A-Z]+: .*ServiceUnavailable.*gave up after \d+ attempts"
    ):
        prepare(root, options)
    thread.join()
    proxy.reset_counts()


def test_a_loader_epoch_waits_out_an_outage(proxy, root, s3_server):
    direct = s3_server.storage_options
    write_webdataset(root, shards=6, samples_per_shard=10, image_bytes=50, storage_options=direct)
    prepare(root, direct)
    expected = loader_keys(root, direct, batches=6)
    thread = outage_after_first_request(proxy, OUTAGE_S)
    got = loader_keys(root, {**through(proxy), "retry_deadline_s": OUTAGE_S * 4}, batches=6)
    thread.join()
    assert proxy.faulted().get("outage", 0) > 0
    proxy.reset_counts()
    assert got == expected


def _reupload_in_parts(root: str, options: dict, rel: str, part: int) -> None:
    """Upload `rel` again as a multipart upload of `part`-byte parts (ETag `<md5 of the parts' md5s>-N`)."""
    import s3fs

    data = open_storage(root, options).read_bytes(rel)
    fs = s3fs.S3FileSystem(
        key=options["key"],
        secret=options["secret"],
        endpoint_url=options["endpoint_url"],
        skip_instance_cache=True,
    )
    with fs.open(f"{root.removeprefix('s3://')}/{rel}", "wb", block_size=part) as f:
        for i in range(0, len(data), part):
            f.write(data[i : i + part])
    assert (
        fs.info(f"{root.removeprefix('s3://')}/{rel}")["ETag"]
        .strip('"')
        .endswith(f"-{-(-len(data) // part)}")
    )


@pytest.mark.parametrize("how", ["one PUT", "multipart", "streamed"])
def test_a_damaged_shard_read_during_prepare_is_not_published(proxy, root, s3_server, monkeypatch, how):
    """Found by the fault campaign (benchmarks/fault_campaign.py): a shard body damaged on its way to prepare (bits
    flipped in payload bytes, the tar headers intact) was indexed as read, so the published parts.parquet recorded
    CRC32Cs of the damaged bytes. With `verify="crc"` the shard's bytes are checked against its ETag and a damaged
    read done again (index/shard_read.py): the files of a fault-free prepare. For a shard uploaded in one PUT (ETag:
    its MD5), one uploaded in 5 MiB parts (ETag `<hex>-2`), and one too large to be read whole (indexed from a
    stream of windows, each hashed as the walk passes it)."""
    from energon_arrow import tar

    direct = s3_server.storage_options
    if how == "one PUT":
        write_webdataset(root, shards=2, samples_per_shard=4, image_bytes=20000, storage_options=direct)
    elif how == "streamed":
        monkeypatch.setattr(tar, "WHOLE_READ_LIMIT", 16 << 10)
        write_webdataset(root, shards=2, samples_per_shard=4, image_bytes=20000, storage_options=direct)
    else:
        write_webdataset(root, shards=2, samples_per_shard=3, image_bytes=2_000_000, storage_options=direct)
        rel = next(
            f for f in open_storage(root, direct).list_files("**/*.tar") if f.endswith("shard-000001.tar")
        )
        _reupload_in_parts(root, direct, rel, 5 << 20)
    prepare(root, direct)
    reference = published(root, direct)
    strip_to_shards(root, direct)
    proxy.reset_counts()
    proxy.inject_for("shard-000001.tar", "corrupt_response")
    try:
        prepare(root, through(proxy, verify="crc"))
    finally:
        faulted = proxy.faulted()
        proxy.reset_counts()
    assert faulted == {"corrupt_response": 1}
    assert published(root, direct) == reference


def test_a_shard_damaged_on_every_read_is_a_clear_error(proxy, root, s3_server):
    """The same shard damaged on each of prepare's reads: one error naming it, its MD5 and ETag and the reads;
    nothing published."""
    direct = s3_server.storage_options
    write_webdataset(root, shards=2, samples_per_shard=4, image_bytes=20000, storage_options=direct)
    proxy.reset_counts()
    proxy.inject_for("shard-000001.tar", *["corrupt_response"] * 3)
    try:
        with pytest.raises(StorageError, match=r"shard-000001\.tar: GET: the bytes read have MD5 .* 3 reads"):
            prepare(root, through(proxy, retries=2, verify="crc"))
    finally:
        proxy.reset_counts()
    assert not open_storage(root, direct).exists(".nv-meta/.info.json")
