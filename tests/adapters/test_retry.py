"""RetryPolicy arithmetic and error classification of real exception types."""

from __future__ import annotations

import errno
import http.client

import pytest

from energon_arrow.adapters import AccessDenied, NotFound, RetryPolicy, StorageError, TransientError
from energon_arrow.adapters.errors import ObjectChanged, classify
from energon_arrow.adapters.retry import call_with_retries
from energon_arrow.adapters.s3direct import S3HttpError


def test_delays_grow_and_are_capped():
    p = RetryPolicy(attempts=10, base_delay=0.1, max_delay=1.0, jitter=0.0)
    assert [p.delay(i) for i in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    jittery = RetryPolicy(base_delay=1.0, max_delay=1.0, jitter=0.5)
    assert all(1.0 <= jittery.delay(3) <= 1.5 for _ in range(50))


@pytest.mark.parametrize("kwargs", [{"attempts": 0}, {"base_delay": -1}, {"max_delay": -1}])
def test_invalid_policies(kwargs):
    with pytest.raises(ValueError, match="RetryPolicy"):
        RetryPolicy(**kwargs)


def test_call_with_retries_counts_attempts_and_sleeps_per_policy():
    calls, sleeps = [], []

    def flaky():
        calls.append(1)
        raise ConnectionResetError(errno.ECONNRESET, "reset by peer")

    policy = RetryPolicy(attempts=3, base_delay=0.5, max_delay=0.6, jitter=0.0)
    with pytest.raises(TransientError, match=r"s3://b/k: .*gave up after 3 attempts"):
        call_with_retries(flaky, "s3://b/k", policy, sleep=sleeps.append)
    assert len(calls) == 3 and sleeps == [0.5, 0.6]


@pytest.mark.parametrize(
    "exc, kind",
    [
        (S3HttpError(404, "NoSuchKey", "gone"), NotFound),
        (S3HttpError(404, "NoSuchBucket", ""), NotFound),
        (S3HttpError(403, "SignatureDoesNotMatch", ""), AccessDenied),
        (S3HttpError(503, "SlowDown", ""), TransientError),
        (S3HttpError(500, "InternalError", ""), TransientError),
        (S3HttpError(400, "InvalidArgument", "bad"), StorageError),
        (S3HttpError(503, "SlowDownRead", ""), TransientError),
        (S3HttpError(503, "SlowDownWrite", ""), TransientError),
        (S3HttpError(429, "TooManyRequests", ""), TransientError),
        (S3HttpError(502, "BadGateway", ""), TransientError),
        (S3HttpError(500, "InternalServerError", ""), TransientError),
        (S3HttpError(599, "AnythingElse", ""), TransientError),  # every 5xx, whatever the code
        (S3HttpError(400, "ThrottlingException", ""), TransientError),
        (S3HttpError(400, "RequestLimitExceeded", ""), TransientError),  # from botocore's throttling list
        (S3HttpError(400, "RequestTimeout", ""), TransientError),
        (S3HttpError(400, "BadDigest", ""), TransientError),
        (S3HttpError(403, "SlowDown", ""), AccessDenied),  # the status decides first
        (S3HttpError(404, "InternalError", ""), NotFound),
        (S3HttpError(412, "PreconditionFailed", ""), ObjectChanged),
        (ConnectionResetError(errno.ECONNRESET, "reset"), TransientError),
        (http.client.RemoteDisconnected("closed"), TransientError),
        (http.client.IncompleteRead(b"", 10), TransientError),
        (TimeoutError("timed out"), TransientError),
        (FileNotFoundError(errno.ENOENT, "missing"), NotFound),
        (PermissionError(errno.EACCES, "denied"), AccessDenied),
        (IsADirectoryError(errno.EISDIR, "dir"), StorageError),
    ],
)
def test_classification(exc, kind):
    err = classify(exc, "s3://bucket/key")
    assert type(err) is kind and str(err).startswith("s3://bucket/key: ")


def test_wrapped_botocore_errors_are_classified_through_the_chain():
    from botocore.exceptions import ClientError

    inner = ClientError({"Error": {"Code": "SlowDown", "Message": "reduce"}}, "GetObject")
    try:
        try:
            raise inner
        except ClientError as e:
            raise OSError(errno.EIO, "wrapped") from e
    except OSError as outer:
        assert isinstance(classify(outer, "s3://b/k"), TransientError)


def test_botocore_status_only_errors_are_classified_by_status():
    from botocore.exceptions import ClientError

    throttled = ClientError({"Error": {}, "ResponseMetadata": {"HTTPStatusCode": 429}}, "GetObject")
    assert isinstance(classify(throttled, "s3://b/k"), TransientError)
    denied = ClientError(
        {"Error": {"Code": "Throttling"}, "ResponseMetadata": {"HTTPStatusCode": 403}}, "GetObject"
    )
    assert isinstance(classify(denied, "s3://b/k"), AccessDenied)


def test_botocore_retries_replace_only_the_default_single_attempt():
    from energon_arrow.adapters.options import botocore_retries, normalise_s3_options

    default = normalise_s3_options({"anon": True}, "s3://b/k")["config_kwargs"]
    assert botocore_retries(default, 4)["retries"] == {"mode": "standard", "total_max_attempts": 4}
    assert botocore_retries(None, 2)["retries"] == {"mode": "standard", "total_max_attempts": 2}
    mine = {"retries": {"mode": "adaptive", "max_attempts": 9}, "connect_timeout": 3}
    assert botocore_retries(mine, 4) == mine


def test_retrying_fs_is_made_once_per_process_and_options():
    """Each dataset open makes a new Storage; its retrying s3fs instance is reused (a new one builds a botocore
    client: 70-180 ms of CPU per open), separate from `fs` (retries 1) and per retry policy."""
    from energon_arrow.adapters import open_storage

    options = {"endpoint_url": "http://127.0.0.1:9", "anon": True}
    a = open_storage("s3://bucket/ds", options, retry=RetryPolicy(attempts=4))
    b = open_storage("s3://bucket/other", dict(options), retry=RetryPolicy(attempts=4))
    c = open_storage("s3://bucket/ds", options, retry=RetryPolicy(attempts=6))
    assert a.retrying_fs is b.retrying_fs and a.retrying_fs is not a.fs
    assert c.retrying_fs is not a.retrying_fs and (a.retrying_fs.retries, c.retrying_fs.retries) in (
        (4, 6),
        (1, 1),
    )


def test_retrying_fs_has_exactly_one_retry_loop():
    """s3fs with the error-handler hook retries in its own loop (botocore makes one attempt); an older s3fs
    gets botocore's standard retry mode instead and a single s3fs attempt: the tries never multiply."""
    import s3fs.core

    from energon_arrow.adapters import open_storage

    store = open_storage(
        "s3://bucket/ds", {"endpoint_url": "http://127.0.0.1:9", "anon": True}, retry=RetryPolicy(attempts=4)
    )
    reader = store.retrying_fs
    retries = reader.config_kwargs.get("retries")
    if hasattr(s3fs.core, "set_custom_error_handler"):
        assert (reader.retries, retries) == (4, {"total_max_attempts": 1})
    else:
        assert (reader.retries, retries) == (1, {"mode": "standard", "total_max_attempts": 4})
