"""Ranged S3 GETs and single-request PUTs over keep-alive HTTP connections, signed with AWS SigV4 using only the
standard library.

s3fs/aiobotocore spend about 2 ms of CPU per request (event hooks, signing, response parsing); on a few cores
that, not the network, caps how many small ranges per second one process can fetch (or how many small files,
such as one `.tar.idx` per shard, it can write). This client does two things: `GET bucket/key` with a `Range`
header and `PUT bucket/key` of a bytes object, on a pool of threads that each keep their own connections. It is
used when the endpoint is explicit (S3-compatible servers, or AWS via `endpoint_url`) and the options hold only
settings it implements (adapters.s3settings); everything else goes through s3fs.

What it checks: every body has the length the server announced (a short one is a transient error), ranges
start where asked, whole-object bodies match the checksum the server sends (`x-amz-checksum-crc32`, `-sha1`,
`-sha256` or `Content-MD5`), and a GET given the ETag of an earlier response (`get(..., etag=...)`) sends
`If-Match` and refuses a different version. Every PUT carries a checksum the store verifies (`upload_checksum`:
`Content-MD5` by default, or `x-amz-checksum-crc32`), so a body damaged on the way is refused (BadDigest, retried)
rather than stored: several S3-compatible stores (SeaweedFS among them) do not check the signed SHA-256 of the
payload. With `upload_checksum="none"`, PUTs over TLS still carry `Content-MD5` (their payload is not signed). A bucket in another region (301/400 naming `x-amz-bucket-region`) is
asked again, once, signed for that region.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import http.client
import os
import re
import threading
import weakref
import zlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import quote, urlsplit

from energon_arrow.adapters.httpconn import BLOCK, Connector, Route
from energon_arrow.adapters.receive import ReceiveBuffer
from energon_arrow.adapters.sigv4 import EMPTY_SHA256, SigV4Signer

_DNS_BUCKET = re.compile(r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")


def _md5_update(state, block):
    state.update(block)
    return state


# upload_checksum -> (header, initial state, update(state, block) -> state, header value of the final state)
_UPLOAD_DIGESTS = {
    "md5": ("Content-MD5", hashlib.md5, _md5_update, lambda h: base64.b64encode(h.digest()).decode()),
    "crc32": (
        "x-amz-checksum-crc32",
        lambda: 0,
        lambda crc, block: zlib.crc32(block, crc),
        lambda crc: base64.b64encode(crc.to_bytes(4, "big")).decode(),
    ),
    "none": None,
}


class S3HttpError(OSError):
    """A non-2xx answer; `response` is shaped like botocore's so errors.classify() reads it."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"HTTP {status} {code}: {message}" if message else f"HTTP {status} {code}")
        self.status = status
        self.response = {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}


class BodyChecksumMismatch(OSError):
    """A body that does not match the checksum its response carried (damaged in transit: retried)."""


class _WrongRegion(Exception):
    """A 301/307/400 answer naming the bucket's region; `error` is what it means if that is our region."""

    def __init__(self, region: str, error: S3HttpError):
        self.region, self.error = region, error


class DirectRangeClient:
    """GET byte ranges of S3 objects and PUT whole ones. Not picklable on purpose: each process builds its own
    from options (adapters.s3settings.direct_client_for)."""

    def __init__(
        self,
        endpoint: str,
        region: str,
        credentials,
        connector: Connector | None = None,
        addressing_style: str = "path",
        workers: int = 32,
        verify_checksums: bool = True,
        upload_checksum: str = "md5",
    ):
        """`verify_checksums`: ask for and check the stored checksum of whole-object reads (botocore's
        response_checksum_validation "when_supported"; False is its "when_required"). `upload_checksum`: "md5",
        "crc32" or "none", what every PUT carries for the store to verify."""
        if upload_checksum not in _UPLOAD_DIGESTS:
            raise ValueError(
                f"upload_checksum must be one of {', '.join(_UPLOAD_DIGESTS)}, got {upload_checksum!r}"
            )
        parts = urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"endpoint must be http(s)://host[:port], got {endpoint!r}")
        if addressing_style not in ("path", "virtual", "auto"):
            raise ValueError(
                f"addressing_style must be 'path', 'virtual' or 'auto', got {addressing_style!r}"
            )
        self._scheme = parts.scheme
        self._host = parts.hostname
        self._port = parts.port or (443 if self._scheme == "https" else 80)
        self._default_port = self._port == (443 if self._scheme == "https" else 80)
        self._base = parts.path.rstrip("/")
        self._virtual = addressing_style == "virtual"  # "auto" with an explicit endpoint is path style
        self._region = region
        self._verify_checksums = verify_checksums
        self._upload_checksum = upload_checksum
        if upload_checksum == "none" and self._scheme == "https":
            self._upload_checksum = "md5"  # an unsigned payload always carries one
        self._bucket_regions: dict[str, str] = {}  # learnt from redirects
        self._signer = SigV4Signer(credentials)
        self._connector = connector or Connector()
        self._settings = (endpoint, region, credentials, self._connector, addressing_style, workers)
        self._local = threading.local()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ea-s3get")
        # every thread's open connections, closed when the client goes away or at interpreter exit at the
        # latest (thread-local sockets would otherwise be reclaimed unclosed: ResourceWarnings at exit)
        self._routes: dict[int, Route] = {}  # id -> route (a Route is not hashable)
        self._routes_lock = threading.Lock()
        weakref.finalize(self, _close_routes, self._routes, self._routes_lock, os.getpid())

    def fork_copy(self) -> DirectRangeClient:
        """A client with this one's settings and credentials but its own connections and threads, for a forked
        child process (building one from the options again costs a botocore session, tens of milliseconds per
        DataLoader worker before its first read)."""
        endpoint, region, credentials, connector, addressing_style, workers = self._settings
        return DirectRangeClient(
            endpoint,
            region,
            credentials,
            connector,
            addressing_style,
            workers,
            self._verify_checksums,
            self._upload_checksum,
        )

    # ---- public -------------------------------------------------------------------------------------------
    def get(self, bucket: str, key: str, start: int = 0, end: int | None = None) -> bytes:
        """Bytes [start, end) of s3://bucket/key (fewer if the object is shorter); end=None: the whole object."""
        return self.get_pinned(bucket, key, start, end)[0]

    def get_pinned(
        self,
        bucket: str,
        key: str,
        start: int = 0,
        end: int | None = None,
        etag: str | None = None,
        sink: ReceiveBuffer | None = None,
    ) -> tuple[bytes | ReceiveBuffer, str | None]:
        """`get` plus the ETag (without quotes) of the object read. With `etag`, only that version is read
        (If-Match): another one is an S3HttpError 412. With `sink`, the body is received into it as it arrives
        and the sink is returned in place of the bytes."""
        if end is not None and end <= start:
            return (b"" if sink is None else sink), etag
        headers = {}
        if end is not None:
            headers["Range"] = f"bytes={start}-{end - 1}"
        elif self._verify_checksums:
            headers["x-amz-checksum-mode"] = "ENABLED"  # ask for the stored checksum of the whole object
        if etag is not None:
            headers["If-Match"] = f'"{etag}"'
        reader = _GetReader(start, end, etag, self._verify_checksums, sink)
        return self._send("GET", bucket, key, headers, None, EMPTY_SHA256, reader)

    def put(self, bucket: str, key: str, data: bytes) -> None:
        """Write s3://bucket/key as one PUT (the object appears whole or not at all), with the `upload_checksum`
        header. Over plain HTTP the payload is signed by its SHA-256; over TLS it is sent as UNSIGNED-PAYLOAD, as
        botocore does."""
        self._put_body(bucket, key, (data,), len(data), data)

    def put_file(self, bucket: str, key: str, local: str) -> None:
        """`put` of a local file, streamed from disk (memory stays bounded; hashed in a first pass)."""
        with open(local, "rb") as f:
            blocks = iter(lambda: f.read(BLOCK), b"")
            self._put_body(bucket, key, blocks, os.fstat(f.fileno()).st_size, f)

    def _put_body(self, bucket: str, key: str, blocks, size: int, body) -> None:
        """PUT `body` (bytes or a seekable file) of `size` bytes whose content `blocks` yields, for hashing."""
        sign = hashlib.sha256() if self._scheme == "http" else None
        check = _UPLOAD_DIGESTS[self._upload_checksum]
        state = check[1]() if check else None
        for block in blocks:
            if sign is not None:
                sign.update(block)
            if check:
                state = check[2](state, block)
        headers = {"Content-Length": str(size)}
        if check:
            headers[check[0]] = check[3](state)
        payload = "UNSIGNED-PAYLOAD" if sign is None else sign.hexdigest()
        self._send("PUT", bucket, key, headers, body, payload, _read_put)

    def get_many(self, requests: Sequence[tuple]) -> list:
        """Many `get_pinned(bucket, key, start, end, etag[, sink])` concurrently; each result is (bytes or the
        sink, etag) or the exception of that request."""
        return self._each(self.get_pinned, requests)

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

    # ---- requests -----------------------------------------------------------------------------------------
    def _address(self, bucket: str, key: str) -> tuple[str, str]:
        """(host, path) of an object: virtual-hosted where asked and the bucket name allows it, else path style."""
        quoted_key = quote(key, safe="/~")
        if self._virtual and _DNS_BUCKET.match(bucket) and not (self._scheme == "https" and "." in bucket):
            return f"{bucket}.{self._host}", f"{self._base}/{quoted_key}"
        return self._host, f"{self._base}/{quote(bucket, safe='')}/{quoted_key}"

    def _send(self, method: str, bucket: str, key: str, headers: dict, body, payload: str, reader):
        """Sign and send one request and hand the response to `reader(resp)`; a wrong-region answer is followed
        once, signed for the region it names (remembered for the bucket)."""
        host, path = self._address(bucket, key)
        host_header = host if self._default_port else f"{host}:{self._port}"
        for _ in range(2):
            region = self._bucket_regions.get(bucket, self._region)
            signed = {"Host": host_header, **headers}
            self._signer.sign(method, path, signed, region, payload)
            try:
                return self._on_connection(
                    host,
                    functools.partial(
                        self._exchange, method=method, path=path, headers=signed, body=body, reader=reader
                    ),
                )
            except _WrongRegion as exc:
                wrong = exc
            if wrong.region == region:
                break
            self._bucket_regions[bucket] = wrong.region
        error = wrong.error
        if error.status != 400:
            error = S3HttpError(
                error.status,
                error.response["Error"]["Code"],
                f"the bucket {bucket!r} is in region {wrong.region!r} and was redirected there too: set "
                "endpoint_url to the bucket's regional endpoint",
            )
        raise error

    def _exchange(self, route: Route, method: str, path: str, headers: dict, body, reader):
        if hasattr(body, "seek"):
            body.seek(0)
        route.conn.request(
            method, route.target_prefix + path, body=body, headers={**headers, **route.proxy_headers}
        )
        resp = route.conn.getresponse()
        try:
            if resp.status >= 300 and resp.status != 416:
                error = resp.read()
                region = resp.getheader("x-amz-bucket-region") or _xml_field(error, "Region")
                code, message = _xml_field(error, "Code") or str(resp.status), _xml_field(error, "Message")
                if resp.status in (301, 307) and not region:
                    message = f"{message} (the bucket is elsewhere: set region_name / endpoint_url)".lstrip()
                failure = S3HttpError(resp.status, code, message)
                if resp.status in (301, 307, 400) and region:
                    raise _WrongRegion(region, failure)
                raise failure
            return reader(resp)
        finally:
            if resp.will_close:
                self._drop_connection(route)

    def _on_connection(self, host: str, exchange):
        """`exchange(route)` on this thread's keep-alive connection to `host`; when the server had closed that
        connection while it was idle, one immediate try on a fresh one (GET and PUT are idempotent)."""
        route, reused = self._connection(host)
        try:
            return exchange(route)
        except (S3HttpError, _WrongRegion, BodyChecksumMismatch):
            raise
        except (http.client.RemoteDisconnected, BrokenPipeError):
            self._drop_connection(route)
            if not reused:
                raise
        except BaseException:
            self._drop_connection(route)
            raise
        route, _ = self._connection(host)
        try:
            return exchange(route)
        except (S3HttpError, _WrongRegion, BodyChecksumMismatch):
            raise
        except BaseException:
            self._drop_connection(route)
            raise

    def _connection(self, host: str) -> tuple[Route, bool]:
        routes = getattr(self._local, "routes", None)
        if routes is None:
            routes = self._local.routes = {}
        route = routes.get(host)
        if route is not None:
            return route, True
        route = routes[host] = self._connector.connect(self._scheme, host, self._port)
        with self._routes_lock:
            self._routes[id(route)] = route
        return route, False

    def _drop_connection(self, route: Route) -> None:
        route.conn.close()
        with self._routes_lock:
            self._routes.pop(id(route), None)
        routes = getattr(self._local, "routes", {})
        for host, r in list(routes.items()):
            if r is route:
                del routes[host]


def _close_routes(routes: dict[int, Route], lock: threading.Lock, pid: int) -> None:
    """Close the connections a client opened in process `pid` (a forked child leaves its parent's alone)."""
    if os.getpid() != pid:
        return
    with lock:
        for route in routes.values():
            route.conn.close()
        routes.clear()


class _GetReader:
    """Reads a GET response and checks it (see the module docstring)."""

    def __init__(
        self,
        start: int,
        end: int | None,
        etag: str | None,
        verify: bool = True,
        sink: ReceiveBuffer | None = None,
    ):
        self.start, self.end, self.etag, self.verify, self.sink = start, end, etag, verify, sink

    def __call__(self, resp) -> tuple[bytes | ReceiveBuffer, str | None]:
        etag = (resp.getheader("ETag") or "").strip('"') or None
        if resp.status == 416:  # the range starts at or beyond the end: an empty read, like s3fs
            resp.read()
            return (b"" if self.sink is None else self.sink), etag or self.etag
        if self.etag is not None and etag is not None and etag != self.etag:  # a server that ignored If-Match
            resp.read()
            raise S3HttpError(412, "PreconditionFailed", f"ETag is now {etag}, was {self.etag}")
        if resp.status == 206:
            got = re.match(r"bytes (\d+)-", resp.getheader("Content-Range") or "")
            if got is None or int(got.group(1)) != self.start:
                resp.read()
                raise S3HttpError(
                    502,
                    "InvalidContentRange",
                    f"asked for bytes from {self.start}, got {resp.getheader('Content-Range')!r}",
                )
            if self.sink is None:
                return resp.read(), etag  # http.client raises IncompleteRead on a body shorter than announced
            left = self.sink.size - self.sink.received
            if resp.length is not None and resp.length != left:
                resp.read()
                raise S3HttpError(
                    502, "InvalidContentRange", f"a body of {resp.length} bytes for {left} asked"
                )
            if self.sink.whole:
                self.sink.write(resp.read())  # http.client raises IncompleteRead on a short body
            else:
                self.sink.receive(resp.readinto, left)
            return self.sink, etag
        data = resp.read()
        if self.verify:
            _verify_checksums(resp, data)
        if self.end is not None:  # the server ignored Range and sent the whole object
            data = data[self.start : self.end]
        if self.sink is None:
            return data, etag
        self.sink.write(data)
        return self.sink, etag


def _read_put(resp) -> None:
    resp.read()


def _verify_checksums(resp, data: bytes) -> None:
    """Compare a whole-object body with the full-object checksums its response carries (composite checksums of
    multipart uploads, `...-N`, and algorithms the standard library lacks such as CRC32C are not checked)."""
    checks = {
        "x-amz-checksum-crc32": lambda: zlib.crc32(data).to_bytes(4, "big"),
        "x-amz-checksum-sha1": lambda: hashlib.sha1(data).digest(),
        "x-amz-checksum-sha256": lambda: hashlib.sha256(data).digest(),
        "Content-MD5": lambda: hashlib.md5(data).digest(),
    }
    for header, compute in checks.items():
        value = resp.getheader(header)
        if not value or "-" in value:
            continue
        if base64.b64encode(compute()).decode() != value.strip():
            raise BodyChecksumMismatch(f"the body of {len(data)} bytes does not match its {header} {value}")


def _xml_field(body: bytes, name: str) -> str:
    found = re.search(rf"<{name}>([^<]*)</{name}>", body[:4096].decode("utf-8", "replace"))
    return found.group(1) if found else ""
