"""Transient S3 failures injected by a relay in front of SeaweedFS, on both paths (direct client and s3fs):
throttling and server errors by status and code, truncated and stalled bodies, damaged bodies, and retries that
must not mix two versions of an object."""

from __future__ import annotations

import posixpath

import pytest

from energon_arrow.adapters import AccessDenied, RetryPolicy, StorageError, open_storage
from energon_arrow.adapters.errors import ObjectChanged
from energon_arrow.testing.seaweedfs import ACCESS_KEY, SECRET_KEY
from tests.adapters.relay import Relay

pytestmark = pytest.mark.s3

FAST = RetryPolicy(attempts=4, base_delay=0.01, max_delay=0.05)
PATHS = pytest.mark.parametrize("direct", [True, False], ids=["direct-client", "s3fs"])


@pytest.fixture(scope="module")
def _relay(s3_server):
    with Relay(s3_server.endpoint_url) as relay:
        yield relay


@pytest.fixture
def relay(_relay):
    _relay.requests.clear()
    _relay.actions.clear()
    yield _relay
    _relay.actions.clear()


def through(relay, bucket, key, direct, **options):
    folder, name = posixpath.split(key)
    options = {"endpoint_url": relay.url, "key": ACCESS_KEY, "secret": SECRET_KEY, **options}
    store = open_storage(f"s3://{bucket}/{folder}", options, retry=FAST)
    store.use_direct_reads = direct
    assert (store._direct is not None) == direct  # the path under test is the one taken
    relay.requests.clear()
    return store, name


@PATHS
@pytest.mark.parametrize(
    "status, code",
    [
        (429, "TooManyRequests"),
        (503, "SlowDownRead"),
        (503, "SlowDownWrite"),
        (500, "InternalServerError"),
        (502, "BadGateway"),
        (509, "BandwidthLimitExceeded"),
        (400, "ThrottlingException"),
        (400, "Throttling"),
        (400, "RequestTimeout"),
    ],
)
def test_throttling_and_server_faults_are_retried(relay, s3_object, direct, status, code):
    bucket, key, data = s3_object
    store, name = through(relay, bucket, key, direct)
    relay.queue(("answer", status, code), ("answer", status, code))
    assert store.read_range(name, 100, 50) == data[100:150]
    assert relay.count("GET") == 3


@PATHS
def test_client_errors_are_not_retried(relay, s3_object, direct):
    bucket, key, _ = s3_object
    store, name = through(relay, bucket, key, direct)
    relay.queue(("answer", 403, "SlowDown"))  # the status decides: a 403 is permanent whatever the code
    with pytest.raises(AccessDenied, match=r"obj\.bin"):
        store.read_range(name, 0, 10)
    relay.queue(("answer", 400, "InvalidArgument"))
    with pytest.raises(StorageError, match="InvalidArgument"):
        store.read_range(name, 0, 10)
    assert relay.count("GET") == 2


@PATHS
def test_writes_are_retried_on_throttling(relay, s3_object, direct):
    bucket, key, _ = s3_object
    store, _ = through(relay, bucket, key, direct)
    relay.queue(("answer", 503, "SlowDownWrite"))
    store.write_atomic("written.bin", b"payload")
    assert relay.count("PUT") == 2
    assert store.read_bytes("written.bin") == b"payload"


@PATHS
def test_truncated_bodies_are_retried(relay, s3_object, direct):
    bucket, key, data = s3_object
    store, name = through(relay, bucket, key, direct)
    relay.queue(("truncate",))
    assert store.read_range(name, 0, 8000) == data[:8000]
    relay.queue(("truncate",))
    assert store.read_bytes(name) == data
    assert [r["outcome"] for r in relay.requests if r["method"] == "GET"].count("truncate") == 2


@PATHS
def test_stalled_responses_time_out_and_are_retried(relay, s3_object, direct):
    bucket, key, data = s3_object
    store, name = through(relay, bucket, key, direct, config_kwargs={"read_timeout": 0.5})
    relay.queue(("stall", 3.0))  # headers sent, then no byte for 3 s
    assert store.read_range(name, 10, 1000) == data[10:1010]
    assert relay.count("GET") == 2


@PATHS
def test_a_body_that_does_not_match_its_checksum_is_read_again(relay, s3_object, direct):
    bucket, key, data = s3_object
    store, name = through(relay, bucket, key, direct)
    relay.queue(("corrupt",))  # one byte flipped; the CRC32 header is the original body's
    assert store.read_bytes(name) == data
    assert relay.count("GET") == 2


@PATHS
def test_checksum_validation_when_required_reads_without_checking(relay, s3_object, direct):
    """botocore's response_checksum_validation="when_required" (a server that sends wrong checksums, as
    SeaweedFS did to energon's msc:// reads): whole-object bodies are not checked, on both paths."""
    bucket, key, data = s3_object
    options = {"config_kwargs": {"response_checksum_validation": "when_required"}}
    store, name = through(relay, bucket, key, direct, **options)
    relay.queue(("corrupt",))
    got = store.read_bytes(name)
    assert got[1:] == data[1:] and got[0] != data[0]  # the damaged body, taken as sent
    assert relay.count("GET") == 1


def test_checksum_validation_refuses_unknown_values(s3_server):
    options = {**s3_server.storage_options, "config_kwargs": {"response_checksum_validation": "never"}}
    store = open_storage("s3://any-bucket/x", options)
    with pytest.raises(ValueError, match="response_checksum_validation must be one of"):
        _ = store._direct


@PATHS
def test_a_stream_never_mixes_two_versions_of_an_object(relay, s3_server, s3_object, direct):
    bucket, key, data = s3_object
    store, name = through(relay, bucket, key, direct)

    def replace():
        s3_server.client().put_object(Bucket=bucket, Key=key, Body=b"new!" * (len(data) // 4))

    with store.open_stream(name, block_size=4096, depth=1) as f:  # the HEAD of the stream pins its ETag
        relay.queue(
            ("call", replace)
        )  # the first block: replaced, then 503; the retry must refuse the new one
        with pytest.raises(ObjectChanged, match=rf"{key}: GET: the object changed while it was being read"):
            f.read(100)
    # a new read sees the new version whole
    assert store.read_range(name, 0, 8) == b"new!new!"
