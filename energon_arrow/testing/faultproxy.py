"""A loopback HTTP proxy that injects real transient failures in front of an S3 server (for retry tests).

Each request takes the next fault from a queue or, when the queue is empty, a random one (`randomize`: a seeded
share of the requests) or none, and is then forwarded unchanged (Host header included, so SigV4 signatures stay
valid). Faults: `"slowdown"` (503 SlowDown), `"error500"` (500 InternalError), `"error429"` (429
TooManyRequests), `"503:<Code>"` (503 with any error code, e.g. a throttling code), `"reset"` (the TCP connection
is reset before any answer), and for GETs `"stall"` (headers, then no byte for `stall_s` seconds) and
`"truncate"` (the full Content-Length announced, half the body sent, the connection closed) and
`"corrupt_response"` (the whole body sent with one bit flipped in each eighth of it: bytes damaged on the way that
no length check notices), and for PUTs
`"corrupt_request"` (one byte of the request body flipped on its way to the server, whose checksum check, if the
client sent a checksum, refuses it). `inject_for(path_part, *faults)` queues faults for the requests whose path
contains `path_part` only (e.g. the GETs of one file). `outage(seconds)` answers every request with 503 for that long. Every request
is counted, so a test can assert how many attempts a client made and how many were faulted.
"""

from __future__ import annotations

import http.client
import random
import socket
import struct
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "upgrade"}
_ERRORS = {
    "slowdown": (503, "SlowDown", "Please reduce your request rate."),
    "error500": (500, "InternalError", "We encountered an internal error. Please try again."),
    "error429": (429, "TooManyRequests", "Too many requests."),
}
_BODY_FAULTS = {
    "stall",
    "truncate",
    "corrupt_response",
}  # GET only: a HEAD or PUT answer has no body to withhold
_REQUEST_FAULTS = {"corrupt_request"}  # PUT only: a request body to damage


def _error(fault: str) -> tuple[int, str, str] | None:
    if fault == "outage":
        return 503, "ServiceUnavailable", "Injected outage."
    if fault.startswith("503:"):
        return 503, fault[4:], "Injected throttling."
    return _ERRORS.get(fault)


class FaultProxy:
    """`with FaultProxy(upstream_url) as proxy:` then point clients at `proxy.endpoint_url`."""

    def __init__(self, upstream_url: str):
        parts = urlsplit(upstream_url)
        self.upstream = (parts.hostname, parts.port or 80)
        self._faults: deque[str] = deque()
        self._targeted: list[list] = []  # [path part, deque of faults]
        self._random: tuple[random.Random, float, tuple[str, ...]] | None = None
        self._outage_until = 0.0
        self.stall_s = 2.0
        self._lock = threading.Lock()
        # (method, path, Range header or "", "forwarded" or the fault)
        self.requests: list[tuple[str, str, str, str]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _handle(self):
                fault = proxy._next_fault(self.command, self.path)
                proxy._record(self.command, self.path, self.headers.get("Range", ""), fault or "forwarded")
                if fault == "reset":
                    # RST instead of FIN: the client sees ECONNRESET
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.close_connection = True
                    self.connection.close()
                    return
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                if fault == "corrupt_request" and body:
                    at = len(body) // 2
                    body = body[:at] + bytes([body[at] ^ 0x01]) + body[at + 1 :]
                elif fault and fault not in _BODY_FAULTS | _REQUEST_FAULTS:
                    status, code, message = _error(fault)
                    xml = (
                        f"<?xml version='1.0'?><Error><Code>{code}</Code><Message>{message}</Message></Error>"
                    )
                    self._answer(status, [("Content-Type", "application/xml")], xml.encode())
                    return
                upstream = http.client.HTTPConnection(*proxy.upstream, timeout=60)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                    upstream.request(self.command, self.path, body=body, headers=headers)
                    resp = upstream.getresponse()
                    data = resp.read()
                    kept = [(k, v) for k, v in resp.getheaders() if k.lower() not in _HOP_BY_HOP]
                finally:
                    upstream.close()
                self._answer(resp.status, kept, data, fault)

            def _answer(self, status, headers, data, fault=None):
                self.send_response_only(status)
                has_length = False
                for k, v in headers:
                    if k.lower() == "content-length":
                        if self.command == "HEAD":
                            has_length = True
                            self.send_header(k, v)
                        continue
                    self.send_header(k, v)
                if not has_length:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command == "HEAD":
                    return
                try:
                    if fault == "truncate":
                        self.wfile.write(data[: len(data) // 2])
                        self.wfile.flush()
                        self.close_connection = True
                        return
                    if fault == "stall":
                        self.wfile.flush()
                        time.sleep(proxy.stall_s)
                    if fault == "corrupt_response" and data:
                        damaged = bytearray(data)
                        for at in {len(data) * k // 8 for k in range(1, 8)}:
                            damaged[at] ^= 0x01
                        data = bytes(damaged)
                    self.wfile.write(data)
                except OSError:  # the client gave up waiting (a stall)
                    self.close_connection = True

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="fault-proxy", daemon=True)
        self._thread.start()

    def inject(self, *faults: str) -> None:
        """Queue faults for the next requests, in order ("corrupt_request" for the next PUT)."""
        self._check(faults)
        with self._lock:
            self._faults.extend(faults)

    def inject_for(self, path_part: str, *faults: str) -> None:
        """Queue faults for the next GETs (and other requests) whose path contains `path_part`, in order."""
        self._check(faults)
        with self._lock:
            self._targeted.append([path_part, deque(faults)])

    def randomize(self, rate: float, faults: tuple[str, ...], seed: int = 0) -> None:
        """Fault a seeded random `rate` of the requests (0 turns it off), each with a fault drawn from `faults`
        (a body fault drawn for a request other than a GET becomes the next error fault of the list)."""
        self._check(faults)
        if not 0 <= rate <= 1 or (rate and not faults):
            raise ValueError(f"rate must be within [0, 1] with faults to draw from, got {rate} and {faults}")
        with self._lock:
            self._random = (random.Random(seed), rate, tuple(faults)) if rate else None

    def outage(self, seconds: float) -> None:
        """Answer every request with 503 ServiceUnavailable for the next `seconds` (recorded as "outage")."""
        with self._lock:
            self._outage_until = time.monotonic() + seconds

    def faulted(self) -> dict[str, int]:
        """Requests answered with each fault so far."""
        with self._lock:
            counts: dict[str, int] = {}
            for *_, outcome in self.requests:
                if outcome != "forwarded":
                    counts[outcome] = counts.get(outcome, 0) + 1
            return counts

    @staticmethod
    def _check(faults) -> None:
        unknown = {
            f
            for f in faults
            if _error(f) is None and f not in _BODY_FAULTS | _REQUEST_FAULTS and f != "reset"
        }
        if unknown:
            known = ", ".join(
                ["reset", "stall", "truncate", "corrupt_response", "corrupt_request", "503:<Code>", *_ERRORS]
            )
            raise ValueError(f"unknown faults {sorted(unknown)}; known: {known}")

    def reset_counts(self) -> None:
        with self._lock:
            self.requests.clear()
            self._faults.clear()
            self._targeted.clear()
            self._random = None
            self._outage_until = 0.0

    def count(self, method: str | None = None) -> int:
        with self._lock:
            return sum(1 for m, *_ in self.requests if method is None or m == method)

    def _next_fault(self, method: str, path: str = "") -> str | None:
        with self._lock:
            if time.monotonic() < self._outage_until:
                return "outage"
            for part, queued in self._targeted:
                if queued and part in path and (queued[0] not in _BODY_FAULTS or method == "GET"):
                    return queued.popleft()
            if self._faults:
                if self._faults[0] in _REQUEST_FAULTS and method != "PUT":
                    return None  # waits for a PUT (e.g. after the POST that starts a multipart upload)
                return self._faults.popleft()
            if self._random is None:
                return None
            rng, rate, faults = self._random
            if rng.random() >= rate:
                return None
            fault = rng.choice(faults)
            if (fault in _BODY_FAULTS and method != "GET") or (fault in _REQUEST_FAULTS and method != "PUT"):
                errors = [f for f in faults if f not in _BODY_FAULTS | _REQUEST_FAULTS] or ["slowdown"]
                fault = rng.choice(errors)
            return fault

    def _record(self, method: str, path: str, byte_range: str, outcome: str) -> None:
        with self._lock:
            self.requests.append((method, path, byte_range, outcome))

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
