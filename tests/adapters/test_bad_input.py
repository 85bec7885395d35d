"""Bad input gives one clear error naming the URL, never the credentials, and is never retried forever."""

from __future__ import annotations

import logging
import pickle

import pytest

from energon_arrow.adapters import (
    AccessDenied,
    InvalidStorageOptions,
    NotFound,
    RetryPolicy,
    StorageError,
    TransientError,
    UnsupportedScheme,
    open_storage,
)
from energon_arrow.testing.seaweedfs import ACCESS_KEY, READER_KEY, READER_SECRET, SECRET_KEY, free_ports

SECRET = "Sup3r-Secret-Value-0123456789"
TOKEN = "Session-Token-Value-9876543210"


def assert_clean(exc: BaseException, *values: str):
    text = str(exc) + repr(exc) + "".join(str(a) for a in exc.args)
    for v in values:
        assert v not in text
    assert pickle.loads(pickle.dumps(exc)).args == exc.args


def test_unknown_scheme():
    with pytest.raises(UnsupportedScheme, match=r"nosuch://bucket/x: unknown URL scheme 'nosuch'"):
        open_storage("nosuch://bucket/x")


def test_s3_url_without_bucket():
    with pytest.raises(StorageError, match=r"s3://: an S3 URL needs a bucket"):
        open_storage("s3://", {"endpoint_url": "http://127.0.0.1:1"})


def test_credentials_in_url_are_refused_without_echo():
    with pytest.raises(InvalidStorageOptions, match=r"s3://\*\*\*@bucket/p: credentials in the URL") as info:
        open_storage(f"s3://AKIAEXAMPLE:{SECRET}@bucket/p")
    assert_clean(info.value, SECRET, "AKIAEXAMPLE")


@pytest.mark.parametrize(
    "options, message",
    [
        ("endpoint_url=x", r"storage options must be a mapping, got str"),
        ({"endpoint": "http://h:1"}, r"unknown S3 storage option\(s\) \['endpoint'\]; known: "),
        ({"endpoint_url": "localhost:8333"}, r"endpoint_url must be a URL like http://host:port"),
        ({"client_kwargs": "region=x"}, r"client_kwargs must be a mapping, got str"),
        ({"key": "k"}, r"give both key and secret"),
        ({"key": 1, "secret": SECRET}, r"key must be a string, got int"),
        ({"secret_key": SECRET}, r"unknown S3 storage option\(s\) \['secret_key'\]"),
    ],
)
def test_malformed_s3_options(options, message):
    with pytest.raises(InvalidStorageOptions, match=r"^s3://bucket/prefix: " + message) as info:
        open_storage("s3://bucket/prefix", options)
    assert_clean(info.value, SECRET)


def test_malformed_memory_and_local_options(tmp_path):
    with pytest.raises(InvalidStorageOptions, match=r"memory://x: unknown storage option\(s\) \['bogus'\]"):
        open_storage("memory://x", {"bogus": 1})
    with pytest.raises(InvalidStorageOptions, match=r"unknown storage option\(s\) \['bogus'\]"):
        open_storage(str(tmp_path), {"bogus": 1})


def test_boto_style_option_names_are_accepted(s3_server):
    bucket = s3_server.create_bucket("ea-tests")
    store = open_storage(
        f"s3://{bucket}",
        {
            "endpoint_url": s3_server.endpoint_url,
            "aws_access_key_id": ACCESS_KEY,
            "aws_secret_access_key": SECRET_KEY,
            "region_name": "us-east-1",
        },
    )
    store.write_atomic("boto-names.txt", b"ok")
    assert store.read_bytes("boto-names.txt") == b"ok"


def test_unreachable_endpoint_gives_up_after_bounded_retries():
    (port,) = free_ports(1)  # nothing listens there
    policy = RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.02)
    options = {"endpoint_url": f"http://127.0.0.1:{port}", "key": ACCESS_KEY, "secret": SECRET}
    store = open_storage("s3://bucket/p", options, retry=policy)
    for direct in (True, False):
        store.use_direct_reads = direct
        with pytest.raises(TransientError, match=r"s3://bucket/p/f\.bin: .*gave up after 3 attempts") as info:
            store.read_range("f.bin", 0, 10)
        assert SECRET not in str(info.value)


@pytest.mark.s3
class TestAgainstEnforcedCredentials:
    """SeaweedFS with `-s3.config` identities: real 403s."""

    def test_wrong_secret_is_access_denied_and_never_leaks(self, s3_iam_server, caplog):
        bucket = s3_iam_server.create_bucket("ea-iam")
        s3_iam_server.client().put_object(Bucket=bucket, Key="d/f.bin", Body=b"0123456789")
        options = {
            "endpoint_url": s3_iam_server.endpoint_url,
            "key": ACCESS_KEY,
            "secret": SECRET,
            "token": TOKEN,
        }
        caplog.set_level(logging.DEBUG)
        store = open_storage(f"s3://{bucket}/d", options)
        ops = {
            "read_range": lambda: store.read_range("f.bin", 0, 4),
            "read_ranges": lambda: store.read_ranges("f.bin", [0, 5], [2, 2]),
            "read_bytes": lambda: store.read_bytes("f.bin"),
            "stat": lambda: store.stat("f.bin"),
            "scan": lambda: store.scan("**/*"),
            "write": lambda: store.write_atomic("g.bin", b"x"),
        }
        for name, op in ops.items():
            for direct in (True, False):
                store.use_direct_reads = direct
                with pytest.raises(AccessDenied, match=rf"^s3://{bucket}/d") as info:
                    op()
                assert_clean(info.value, SECRET, TOKEN)
                assert "permission denied" in str(info.value), name
        blob = pickle.dumps(store)
        assert SECRET.encode() not in blob and TOKEN.encode() not in blob and ACCESS_KEY.encode() not in blob
        assert SECRET not in repr(store) and TOKEN not in repr(store)
        logging.getLogger("botocore.created.later").debug("headers: %s", {"X-Amz-Security-Token": TOKEN})
        logged = "\n".join(r.getMessage() for r in caplog.records)
        assert "X-Amz-Security-Token" in logged
        assert SECRET not in logged and TOKEN not in logged and ACCESS_KEY not in logged
        clone = pickle.loads(blob)  # same process: the credentials come back through the handle
        assert clone.storage_options["secret"] == SECRET

    def test_signatures_of_unusual_keys(self, s3_iam_server):
        bucket = s3_iam_server.create_bucket("ea-iam")
        key = "odd/we ird+na=me;ü~(1).bin"
        s3_iam_server.client().put_object(Bucket=bucket, Key=key, Body=b"0123456789")
        options = {"endpoint_url": s3_iam_server.endpoint_url, "key": ACCESS_KEY, "secret": SECRET_KEY}
        store = open_storage(f"s3://{bucket}/odd", options)
        assert store.read_range("we ird+na=me;ü~(1).bin", 2, 3) == b"234"
        assert store.read_bytes("we ird+na=me;ü~(1).bin") == b"0123456789"
        store.write_atomic("new/we ird+na=me;ü~(2).bin", b"written")  # a signed PUT of the direct client
        assert (
            s3_iam_server.client()
            .get_object(Bucket=bucket, Key="odd/new/we ird+na=me;ü~(2).bin")["Body"]
            .read()
            == b"written"
        )

    def test_read_only_identity(self, s3_iam_server):
        bucket = s3_iam_server.create_bucket("ea-iam")
        s3_iam_server.client().put_object(Bucket=bucket, Key="r/f.bin", Body=b"readable")
        store = open_storage(
            f"s3://{bucket}/r",
            {"endpoint_url": s3_iam_server.endpoint_url, "key": READER_KEY, "secret": READER_SECRET},
        )
        assert store.read_bytes("f.bin") == b"readable"
        assert store.read_ranges("f.bin", [4], [4])[0] == b"able"
        assert store.list_files() == ["f.bin"]
        with pytest.raises(AccessDenied, match=rf"s3://{bucket}/r/new\.bin"):
            store.write_atomic("new.bin", b"x")
        with pytest.raises(AccessDenied, match=rf"s3://{bucket}/r/f\.bin"):
            store.remove("f.bin")
        with pytest.raises(StorageError, match=rf"s3://{bucket}/r: could not delete 1 object"):
            store.remove("", recursive=True)
        assert store.read_bytes("f.bin") == b"readable"

    def test_missing_bucket_and_key(self, s3_iam_server):
        options = {"endpoint_url": s3_iam_server.endpoint_url, "key": ACCESS_KEY, "secret": SECRET_KEY}
        bucket = s3_iam_server.create_bucket("ea-iam")
        with pytest.raises(NotFound, match=rf"s3://{bucket}/missing\.bin"):
            open_storage(f"s3://{bucket}", options).read_bytes("missing.bin")
        nobucket = open_storage("s3://ea-no-such-bucket/p", options)
        for op in (
            lambda: nobucket.read_bytes("f.bin"),
            lambda: nobucket.read_range("f.bin", 0, 1),
            lambda: nobucket.stat("f.bin"),
        ):
            with pytest.raises(NotFound, match=r"s3://ea-no-such-bucket/p/f\.bin"):
                op()
        with pytest.raises(NotFound, match=r"s3://ea-no-such-bucket/p"):
            nobucket.list_files("**/*.tar")
