"""Uploads carry a checksum SeaweedFS verifies (it does not check the signed SHA-256 of the payload): a request
body damaged on the way (the FaultProxy flips one byte of a PUT) is refused with BadDigest and sent again, on
both S3 paths (direct client: Content-MD5 or x-amz-checksum-crc32; s3fs: botocore's CRC32, single PUTs and
multipart parts); a body damaged on every try ends in one clear error; `upload_checksum="none"` shows the fault
is real (the damaged bytes are stored)."""

from __future__ import annotations

import os
import uuid

import pytest

from energon_arrow.adapters import InvalidStorageOptions, RetryPolicy, StorageError, open_storage
from energon_arrow.testing.seaweedfs import ACCESS_KEY, SECRET_KEY

pytestmark = pytest.mark.s3

FAST = RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.05)
DATA = bytes(range(256)) * 40


def store_through(fault_proxy, s3_server, direct: bool, **extra):
    bucket = s3_server.create_bucket("ea-tests")
    options = {"endpoint_url": fault_proxy.endpoint_url, "key": ACCESS_KEY, "secret": SECRET_KEY, **extra}
    store = open_storage(f"s3://{bucket}/up-{uuid.uuid4().hex[:8]}", options, retry=FAST)
    store.use_direct_reads = direct
    assert (store._direct is not None) == direct
    clean = open_storage(store.url, s3_server.storage_options)  # reads straight from SeaweedFS
    return store, clean


@pytest.mark.parametrize(
    "direct, checksum",
    [(True, "md5"), (True, "crc32"), (False, "md5"), (False, "crc32")],
    ids=["direct-md5", "direct-crc32", "s3fs-md5", "s3fs-crc32"],
)
def test_a_damaged_put_is_refused_and_sent_again(fault_proxy, s3_server, direct, checksum):
    store, clean = store_through(fault_proxy, s3_server, direct, upload_checksum=checksum)
    fault_proxy.inject("corrupt_request")
    store.write_atomic("obj.bin", DATA)
    assert [o for m, _, _, o in fault_proxy.requests if m == "PUT"] == ["corrupt_request", "forwarded"]
    assert clean.read_bytes("obj.bin") == DATA


def test_damaged_multipart_parts_are_refused_and_sent_again(fault_proxy, s3_server, tmp_path):
    store, clean = store_through(fault_proxy, s3_server, False)
    local = tmp_path / "big.bin"
    payload = os.urandom(33 << 20)  # s3fs sends files of two parts (16 MiB) or more as multipart uploads
    local.write_bytes(payload)
    fault_proxy.inject("corrupt_request")  # the first part
    store.publish_folder("set", {"big.bin": local, "done": b"marker"})
    outcomes = [o for m, target, _, o in fault_proxy.requests if m == "PUT" and "partNumber" in target]
    assert outcomes.count("corrupt_request") == 1 and len(outcomes) > 3  # the refused upload went again
    assert clean.read_bytes("set/big.bin") == payload


@pytest.mark.parametrize("direct", [True, False], ids=["direct-client", "s3fs"])
def test_a_put_damaged_every_time_is_one_clear_error(fault_proxy, s3_server, direct):
    store, clean = store_through(fault_proxy, s3_server, direct)
    fault_proxy.inject(*["corrupt_request"] * FAST.attempts)
    with pytest.raises(StorageError, match=r"/obj\.bin: PUT: .*BadDigest.*gave up after 3 attempts"):
        store.write_atomic("obj.bin", DATA)
    assert not clean.exists("obj.bin")


def test_without_a_checksum_the_damaged_bytes_would_be_stored(fault_proxy, s3_server):
    store, clean = store_through(fault_proxy, s3_server, True, upload_checksum="none")
    fault_proxy.inject("corrupt_request")
    store.write_atomic("obj.bin", DATA)
    assert clean.read_bytes("obj.bin") != DATA  # what the default checksum prevents


def test_upload_checksum_is_checked(s3_server, tmp_path):
    with pytest.raises(InvalidStorageOptions, match="upload_checksum must be one of md5, crc32, none"):
        open_storage("s3://b/x", {**s3_server.storage_options, "upload_checksum": "sha1"})
    with pytest.raises(InvalidStorageOptions, match="upload_checksum: only for s3://"):
        open_storage(str(tmp_path), {"upload_checksum": "md5"})
