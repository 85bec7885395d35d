"""Ranged S3 GETs and single-request PUTs over keep-alive HTTP connections, signed with AWS SigV4 using only the
standard library.

s3fs/aiobotocore spend about 2 ms of CPU per request (event hooks, signing, response parsing); on a few cores
that, not the network, caps how many small ranges per second one process can fetch (or how many small files,
such as one `.tar.idx` per shard, it can write). This client does two things: `GET bucket/key` with a `Range`
header and `PUT bucket/key` of a bytes object, on a pool of threads that each keep their own connection. It is
used when the endpoint is explicit (S3-compatible servers, or AWS via `endpoint_url`); everything else goes
through s3fs.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import http.client
import json
import os
import re
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import quote, urlsplit

_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
_FILE_BLOCK = 1 << 20  # file bodies are hashed and sent in blocks of this size
# options the direct client understands; any other option (config_kwargs, requester_pays, SSE keys...) means
# the request needs s3fs's full client
_SIMPLE_OPTIONS = {
    "endpoint_url",
    "key",
    "secret",
    "token",
    "profile",
    "anon",
    "client_kwargs",
    "config_kwargs",
    "use_ssl",
    "skip_instance_cache",
    "use_listings_cache",
    "listings_expiry_time",
    "max_paths",
}
_SIMPLE_CLIENT_KWARGS = {"region_name", "endpoint_url", "verify"}


class S3HttpError(OSError):
    """A non-2xx answer; `response` is shaped like botocore's so errors.classify() reads it."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"HTTP {status} {code}: {message}" if message else f"HTTP {status} {code}")
        self.status = status
        self.response = {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}


class DirectRangeClient:
    """GET byte ranges of S3 objects. Not picklable on purpose: each process builds its own from options."""

    def __init__(
        self,
        endpoint: str,
        region: str,
        credentials,
        verify: bool | str = True,
        workers: int = 32,
        connect_timeout: float = 60.0,
        read_timeout: float = 60.0,
    ):
        parts = urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"endpoint must be http(s)://host[:port], got {endpoint!r}")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        default_port = self._port == (443 if self._https else 80)
        self._host_header = self._host if default_port else f"{self._host}:{self._port}"
        self._base = parts.path.rstrip("/")
        self._region = region
        self._credentials = credentials  # botocore Credentials (refreshable) or None for anonymous
        self._verify = verify
        self._timeouts = (connect_timeout, read_timeout)
        self._local = threading.local()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ea-s3get")
        self._signing_keys: dict[tuple[str, str], bytes] = {}

    # ---- public -------------------------------------------------------------------------------------------
    def get(self, bucket: str, key: str, start: int = 0, end: int | None = None) -> bytes:
        """Bytes [start, end) of s3://bucket/key (fewer if the object is shorter); end=None: the whole object."""
        if end is not None and end <= start:
            return b""
        path = self._path(bucket, key)
        headers = {"Host": self._host_header}
        if end is not None:
            headers["Range"] = f"bytes={start}-{end - 1}"
        self._sign("GET", path, headers)
        return self._on_connection(lambda conn: self._exchange(conn, path, headers, start, end))

    def put(self, bucket: str, key: str, data: bytes) -> None:
        """Write s3://bucket/key as one PUT (the object appears whole or not at all). The payload is signed by
        its SHA-256 over plain HTTP and sent as UNSIGNED-PAYLOAD over TLS, as botocore does."""
        path = self._path(bucket, key)
        headers = {"Host": self._host_header, "Content-Length": str(len(data))}
        payload = "UNSIGNED-PAYLOAD" if self._https else hashlib.sha256(data).hexdigest()
        self._sign("PUT", path, headers, payload)
        self._on_connection(lambda conn: self._put_exchange(conn, path, headers, data))

    def put_file(self, bucket: str, key: str, local: str) -> None:
        """`put` of a local file, streamed from disk (memory stays bounded; hashed in a first pass where signed)."""
        path = self._path(bucket, key)
        with open(local, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if self._https:
                payload = "UNSIGNED-PAYLOAD"
            else:
                digest = hashlib.sha256()
                while chunk := f.read(_FILE_BLOCK):
                    digest.update(chunk)
                payload = digest.hexdigest()
            headers = {"Host": self._host_header, "Content-Length": str(size)}
            self._sign("PUT", path, headers, payload)

            def exchange(conn):
                f.seek(0)
                self._put_exchange(conn, path, headers, f)

            self._on_connection(exchange)

    def _path(self, bucket: str, key: str) -> str:
        return f"{self._base}/{quote(bucket, safe='')}/{quote(key, safe='/~')}"

    def _on_connection(self, exchange):
        """`exchange(conn)` on this thread's keep-alive connection; when the server had closed that connection
        while it was idle, one immediate try on a fresh one (GET and PUT are idempotent)."""
        conn, reused = self._connection()
        try:
            return exchange(conn)
        except S3HttpError:
            raise
        except (http.client.RemoteDisconnected, BrokenPipeError):
            self._drop_connection()
            if not reused:
                raise
        except (http.client.HTTPException, OSError):
            self._drop_connection()
            raise
        conn, _ = self._connection()
        try:
            return exchange(conn)
        except S3HttpError:
            raise
        except BaseException:
            self._drop_connection()
            raise

    def get_many(self, requests: Sequence[tuple[str, str, int, int]]) -> list[bytes | BaseException]:
        """Many GETs concurrently; each result is the bytes or the exception of that request."""
        return self._each(self.get, requests)

    def put_many(self, requests: Sequence[tuple[str, str, bytes]]) -> list[BaseException | None]:
        """Many PUTs (bucket, key, data) concurrently; each result is None or the exception of that request."""
        return self._each(self.put, requests)

    def _each(self, call, requests: Sequence[tuple]) -> list:
        """`call(*request)` for every request on the pool (inline for one); exceptions are returned, not raised."""

        def one(req):
            try:
                return call(*req)
            except Exception as exc:  # noqa: BLE001 - returned to the caller for classification
                return exc

        if len(requests) == 1:
            return [one(requests[0])]
        return list(self._pool.map(one, requests))

    # ---- HTTP ---------------------------------------------------------------------------------------------
    def _connection(self) -> tuple[http.client.HTTPConnection, bool]:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            return conn, True
        if self._https:
            import ssl

            ctx = ssl.create_default_context(cafile=self._verify if isinstance(self._verify, str) else None)
            if self._verify is False:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            conn = http.client.HTTPSConnection(
                self._host, self._port, timeout=self._timeouts[0], context=ctx, blocksize=_FILE_BLOCK
            )
        else:
            conn = http.client.HTTPConnection(
                self._host, self._port, timeout=self._timeouts[0], blocksize=_FILE_BLOCK
            )
        conn.connect()
        conn.sock.settimeout(self._timeouts[1])
        self._local.conn = conn
        return conn, False

    def _drop_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def _exchange(self, conn, path: str, headers: Mapping[str, str], start: int, end: int | None) -> bytes:
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        if resp.status not in (200, 206):
            body = resp.read()
            if resp.status == 416:  # range starts at or beyond the end: an empty read, like s3fs
                return b""
            raise S3HttpError(resp.status, *_error_code_message(resp.status, body))
        data = resp.read()  # one pass into a new bytes object (Content-Length known): no extra copy
        if resp.will_close:
            self._drop_connection()
        if resp.status == 200 and end is not None:  # the server ignored Range and sent the whole object
            return data[start:end]
        return data

    def _put_exchange(self, conn, path: str, headers: Mapping[str, str], data) -> None:
        conn.request("PUT", path, body=data, headers=headers)
        resp = conn.getresponse()
        body = resp.read()
        if resp.will_close:
            self._drop_connection()
        if resp.status not in (200, 201, 204):
            raise S3HttpError(resp.status, *_error_code_message(resp.status, body))

    # ---- SigV4 --------------------------------------------------------------------------------------------
    def _sign(self, method: str, path: str, headers: dict[str, str], payload: str = _EMPTY_SHA256) -> None:
        if self._credentials is None:
            return
        creds = self._credentials.get_frozen_credentials()
        now = datetime.datetime.now(datetime.timezone.utc)
        amz_date = now.strftime("%Y%m%dT%H%M%SZ")
        day = amz_date[:8]
        headers["x-amz-date"] = amz_date
        headers["x-amz-content-sha256"] = payload
        if creds.token:
            headers["x-amz-security-token"] = creds.token
        names = sorted(h.lower() for h in headers)
        lower = {k.lower(): " ".join(str(v).split()) for k, v in headers.items()}
        canonical_headers = "".join(f"{n}:{lower[n]}\n" for n in names)
        signed = ";".join(names)
        canonical = f"{method}\n{path}\n\n{canonical_headers}\n{signed}\n{payload}"
        scope = f"{day}/{self._region}/s3/aws4_request"
        to_sign = f"AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
        signature = hmac.new(self._signing_key(creds.secret_key, day), to_sign.encode(), hashlib.sha256)
        headers["Authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={creds.access_key}/{scope}, SignedHeaders={signed}, "
            f"Signature={signature.hexdigest()}"
        )

    def _signing_key(self, secret: str, day: str) -> bytes:
        cache_key = (hashlib.sha256(secret.encode()).hexdigest(), day)
        key = self._signing_keys.get(cache_key)
        if key is None:
            key = f"AWS4{secret}".encode()
            for part in (day, self._region, "s3", "aws4_request"):
                key = hmac.new(key, part.encode(), hashlib.sha256).digest()
            self._signing_keys = {cache_key: key}
        return key


def _error_code_message(status: int, body: bytes) -> tuple[str, str]:
    text = body[:4096].decode("utf-8", "replace")
    code = re.search(r"<Code>([^<]*)</Code>", text)
    message = re.search(r"<Message>([^<]*)</Message>", text)
    return (code.group(1) if code else str(status)), (message.group(1) if message else "")


_CLIENTS: dict[tuple[int, str], DirectRangeClient | None] = {}
_CLIENTS_LOCK = threading.Lock()
os.register_at_fork(after_in_child=lambda: globals().update(_CLIENTS_LOCK=threading.Lock()))


def direct_client_for(options: Mapping[str, Any]) -> DirectRangeClient | None:
    """The direct client for these s3fs options (one per process and options, shared by every Storage), or None
    where only s3fs can serve them (no explicit endpoint, or options such as requester-pays or SSE-C)."""
    cache_key = (os.getpid(), json.dumps(options, sort_keys=True, default=str))  # in memory only
    with _CLIENTS_LOCK:
        if cache_key in _CLIENTS:
            return _CLIENTS[cache_key]
    client = _build_client(options)
    with _CLIENTS_LOCK:
        return _CLIENTS.setdefault(cache_key, client)


def _build_client(options: Mapping[str, Any]) -> DirectRangeClient | None:
    client_kwargs = dict(options.get("client_kwargs") or {})
    config = dict(options.get("config_kwargs") or {})
    if set(options) - _SIMPLE_OPTIONS or set(client_kwargs) - _SIMPLE_CLIENT_KWARGS:
        return None
    if set(config) - {"retries", "connect_timeout", "read_timeout"}:
        return None
    endpoint = (
        options.get("endpoint_url")
        or client_kwargs.get("endpoint_url")
        or os.environ.get("AWS_ENDPOINT_URL_S3")
        or os.environ.get("AWS_ENDPOINT_URL")
    )
    if not endpoint:
        return None
    if options.get("use_ssl") is False and endpoint.startswith("https://"):
        return None
    credentials = None
    import botocore.session

    session = botocore.session.Session(profile=options.get("profile"))
    if not options.get("anon"):
        if options.get("key") and options.get("secret"):
            from botocore.credentials import Credentials

            credentials = Credentials(options["key"], options["secret"], options.get("token"))
        else:
            credentials = session.get_credentials()
    region = client_kwargs.get("region_name") or session.get_config_variable("region") or "us-east-1"
    return DirectRangeClient(
        endpoint,
        region,
        credentials,
        verify=client_kwargs.get("verify", True),
        connect_timeout=float(config.get("connect_timeout", 60)),
        read_timeout=float(config.get("read_timeout", 60)),
    )
