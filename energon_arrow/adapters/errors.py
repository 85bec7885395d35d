"""Storage error types and the classification of backend exceptions into permanent and transient ones."""

from __future__ import annotations

import errno
import functools
import sys

from energon_arrow.adapters.secrets import scrub


class StorageError(OSError):
    """An I/O failure on a storage URL. The message always names the URL (never credentials)."""

    def __init__(self, url: str, message: str):
        url, message = scrub(url), scrub(message)
        super().__init__(f"{url}: {message}")
        self.url = url
        self.reason = message

    def __reduce__(self):  # picklable across processes (worker errors re-raised in the parent)
        return (type(self), (self.url, self.reason))


class NotFound(StorageError, FileNotFoundError):
    """The object, file or bucket does not exist."""


class AccessDenied(StorageError, PermissionError):
    """The store refused access (403 / EACCES)."""


class UnsupportedScheme(StorageError, ValueError):
    """The URL uses a protocol energon-arrow does not support."""


class InvalidStorageOptions(StorageError, ValueError):
    """Storage options are malformed or unknown to the backend."""


class TransientError(StorageError):
    """A failure that may succeed when retried (connection reset, 500, 503 SlowDown)."""


class ObjectChanged(StorageError):
    """The object was replaced while it was being read (its ETag changed between two requests of one read)."""


class NotLocal(StorageError, ValueError):
    """An operation that needs a local file (memory mapping) was asked of a remote one."""


_TRANSIENT_ERRNOS = {errno.ECONNRESET, errno.ECONNREFUSED, errno.ECONNABORTED, errno.EPIPE, errno.ETIMEDOUT}
# Error codes that mean "try again" even when the HTTP status alone does not say so (S3 answers RequestTimeout and
# throttling with 400). botocore's own retry lists are added to these at first use (see _transient_codes).
_TRANSIENT_CODES = {
    "SlowDown",
    "SlowDownRead",
    "SlowDownWrite",
    "InternalError",
    "InternalServerError",
    "ServiceUnavailable",
    "RequestTimeout",
    "BadDigest",  # a PUT body damaged in transit (its Content-MD5 did not match)
    "BadGateway",
    "TooManyRequests",
    "Throttling",
    "ThrottlingException",
}
_DENIED_CODES = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AllAccessDisabled"}
_MISSING_CODES = {"NoSuchKey", "NoSuchBucket", "NotFound"}


@functools.cache
def _transient_codes() -> frozenset[str]:
    """Our codes plus botocore's transient and throttling error codes (its standard retry mode), read from the
    installed botocore so that new codes it learns are retried here too."""
    codes = set(_TRANSIENT_CODES)
    try:
        from botocore.retries import standard
    except ImportError:  # botocore comes with s3fs; without it only our own codes apply
        return frozenset(codes)
    for checker, attr in (
        (standard.TransientRetryableChecker, "_TRANSIENT_ERROR_CODES"),
        (standard.ThrottledRetryableChecker, "_THROTTLED_ERROR_CODES"),
    ):
        codes.update(getattr(checker, attr, ()))
    return frozenset(codes)


def is_transient_status(status: int | None) -> bool:
    """HTTP statuses that are retried whatever the error code says: every 5xx and 429 Too Many Requests."""
    return status is not None and (status >= 500 or status == 429)


def _error_code(exc: BaseException) -> tuple[str | None, int | None]:
    """(S3 error code, HTTP status) of a botocore-shaped error found anywhere in the exception chain."""
    for cur in _chain(exc):
        response = getattr(cur, "response", None)
        if isinstance(response, dict):
            code = response.get("Error", {}).get("Code")
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code or status:
                return (str(code) if code else None), (int(status) if status else None)
    return None, None


_NETWORK_ERRORS = {
    "ConnectionError",  # builtin base of resets/aborts/refusals, and botocore's
    "HTTPClientError",  # botocore: EndpointConnectionError, ConnectionClosedError, ReadTimeoutError, ...
    "ServerDisconnectedError",
    "ClientOSError",
    "ClientPayloadError",
    "IncompleteReadError",
    "IncompleteRead",  # http.client
    "RemoteDisconnected",
    "ResponseStreamingError",
    "ResponseParserError",  # throttling responses with broken XML
    "TimeoutError",
    "FSTimeoutError",
    "FlexibleChecksumError",  # botocore: the body does not match the checksum the server sent
    "BodyChecksumMismatch",  # the same, from the direct client (adapters.s3direct)
}


def _is_transient_network(exc: BaseException) -> bool:
    for e in _chain(exc):
        if {k.__name__ for k in type(e).__mro__} & _NETWORK_ERRORS:
            return True
        if isinstance(e, OSError) and e.errno in _TRANSIENT_ERRNOS:
            return True
    return False


def _chain(exc: BaseException):
    seen = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


# what OpenSSL says when the other side of an https:// endpoint answers in plain HTTP
_NOT_TLS = ("WRONG_VERSION_NUMBER", "wrong version number", "RECORD_LAYER_FAILURE", "packet length too long")


def classify(exc: BaseException, url: str) -> StorageError:
    """Map any backend exception to a StorageError subclass that names `url` (already redacted)."""
    if isinstance(exc, StorageError):
        return exc
    code, status = _error_code(exc)
    detail = _describe(exc)
    if code and code not in detail:  # s3fs's translated errors drop the S3 error code
        detail += f" (S3 error {code}{f', HTTP {status}' if status else ''})"
    names = {type(e).__name__ for e in _chain(exc)}
    if names & {"NoCredentialsError", "PartialCredentialsError"}:
        return AccessDenied(url, f"no usable S3 credentials ({detail})")
    if names & {"ProfileNotFound", "InvalidConfigError", "ParamValidationError"}:
        return InvalidStorageOptions(url, detail)
    ssl = sys.modules.get("ssl")  # not imported: no TLS error can have been raised (saves ~10 ms of start-up)
    if any(
        (ssl is not None and isinstance(e, ssl.SSLCertVerificationError))
        or "CertificateError" in type(e).__name__
        for e in _chain(exc)
    ):
        return StorageError(
            url,
            f"TLS certificate check failed ({detail}); give the CA bundle (AWS_CA_BUNDLE, client_kwargs.verify)",
        )
    if any(marker in str(e) for e in _chain(exc) for marker in _NOT_TLS):  # permanent: retrying cannot help
        return StorageError(
            url, f"the endpoint does not speak TLS: is it http:// rather than https://? ({detail})"
        )
    # the HTTP status decides first; the error code only refines a 4xx (or a response without a status)
    if is_transient_status(status):
        return TransientError(url, f"transient storage error ({detail})")
    if isinstance(exc, FileNotFoundError) or status == 404 or code in _MISSING_CODES:
        return NotFound(url, f"not found ({detail})")
    if isinstance(exc, PermissionError) or status == 403 or code in _DENIED_CODES:
        return AccessDenied(url, f"permission denied ({detail})")
    if status == 412 or code == "PreconditionFailed":
        return ObjectChanged(url, f"the object changed while it was being read ({detail}); read it again")
    if (code is not None and code in _transient_codes()) or _is_transient_network(exc):
        if any("timeout" in type(e).__name__.lower() or "timed out" in str(e) for e in _chain(exc)):
            hint = "read_timeout/connect_timeout; is the endpoint an S3 server?"
            detail = f"no answer within the timeout ({hint}): {detail}"
        return TransientError(url, f"transient storage error ({detail})")
    if isinstance(exc, IsADirectoryError):
        return StorageError(url, f"is a directory ({detail})")
    return StorageError(url, detail)


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if not text.startswith(type(exc).__name__) else text


def install_s3fs_retry_classifier() -> bool:
    """Make s3fs's own retry loop (active only where an instance has `retries` > 1: `Storage.retrying_fs`) also
    retry the errors energon-arrow classifies as transient; s3fs alone retries only network errors and SlowDown.
    Chained after any handler already installed; installed once per process. False where this s3fs has no
    error-handler hook (before 2026.2): the caller then relies on botocore's standard retry mode instead."""
    import s3fs.core

    if not hasattr(s3fs.core, "set_custom_error_handler"):
        return False
    previous = s3fs.core.CUSTOM_ERROR_HANDLER
    if getattr(previous, "energon_arrow", False):
        return True

    def handler(exc: BaseException) -> bool:
        return bool(previous(exc)) or isinstance(classify(exc, ""), TransientError)

    handler.energon_arrow = True
    s3fs.core.set_custom_error_handler(handler)
    return True
