"""Storage error types and the classification of backend exceptions into permanent and transient ones."""

from __future__ import annotations

import errno


class StorageError(OSError):
    """An I/O failure on a storage URL. The message always names the URL (never credentials)."""

    def __init__(self, url: str, message: str):
        from energon_arrow.adapters.options import scrub

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


class NotLocal(StorageError, ValueError):
    """An operation that needs a local file (memory mapping) was asked of a remote one."""


_TRANSIENT_ERRNOS = {errno.ECONNRESET, errno.ECONNREFUSED, errno.ECONNABORTED, errno.EPIPE, errno.ETIMEDOUT}
_TRANSIENT_CODES = {
    "500",
    "502",
    "503",
    "504",
    "SlowDown",
    "InternalError",
    "ServiceUnavailable",
    "RequestTimeout",
}
_DENIED_CODES = {"403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AllAccessDisabled"}
_MISSING_CODES = {"404", "NoSuchKey", "NoSuchBucket", "NotFound"}


def _error_code(exc: BaseException) -> str | None:
    """The S3 error code of a botocore ClientError found anywhere in the exception chain."""
    seen = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        response = getattr(cur, "response", None)
        if isinstance(response, dict):
            err = response.get("Error", {})
            code = err.get("Code")
            if code:
                return str(code)
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if status:
                return str(status)
        cur = cur.__cause__ or cur.__context__
    return None


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


def classify(exc: BaseException, url: str) -> StorageError:
    """Map any backend exception to a StorageError subclass that names `url` (already redacted)."""
    if isinstance(exc, StorageError):
        return exc
    code = _error_code(exc)
    detail = _describe(exc)
    names = {type(e).__name__ for e in _chain(exc)}
    if names & {"NoCredentialsError", "PartialCredentialsError"}:
        return AccessDenied(url, f"no usable S3 credentials ({detail})")
    if names & {"ProfileNotFound", "InvalidConfigError", "ParamValidationError"}:
        return InvalidStorageOptions(url, detail)
    if isinstance(exc, FileNotFoundError) or code in _MISSING_CODES:
        return NotFound(url, f"not found ({detail})")
    if isinstance(exc, PermissionError) or code in _DENIED_CODES:
        return AccessDenied(url, f"permission denied ({detail})")
    if code in _TRANSIENT_CODES or _is_transient_network(exc):
        return TransientError(url, f"transient storage error ({detail})")
    if isinstance(exc, IsADirectoryError):
        return StorageError(url, f"is a directory ({detail})")
    return StorageError(url, detail)


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if not text.startswith(type(exc).__name__) else text
