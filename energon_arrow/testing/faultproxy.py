"""A loopback HTTP proxy that injects real transient failures in front of an S3 server (for retry tests).

Each request takes the next fault from a queue (`"slowdown"`: 503 SlowDown, `"error500"`: 500 InternalError,
`"reset"`: the TCP connection is reset before any answer) or, when the queue is empty, is forwarded unchanged
(Host header included, so SigV4 signatures stay valid). Every request is counted, so a test can assert how many
attempts a client made.
"""

from __future__ import annotations

import http.client
import socket
import struct
import threading
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "upgrade"}
_ERRORS = {
    "slowdown": (503, "SlowDown", "Please reduce your request rate."),
    "error500": (500, "InternalError", "We encountered an internal error. Please try again."),
}


class FaultProxy:
    """`with FaultProxy(upstream_url) as proxy:` then point clients at `proxy.endpoint_url`."""

    def __init__(self, upstream_url: str):
        parts = urlsplit(upstream_url)
        self.upstream = (parts.hostname, parts.port or 80)
        self._faults: deque[str] = deque()
        self._lock = threading.Lock()
        # (method, path, Range header or "", "forwarded" or the fault)
        self.requests: list[tuple[str, str, str, str]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _handle(self):
                fault = proxy._next_fault()
                proxy._record(self.command, self.path, self.headers.get("Range", ""), fault or "forwarded")
                if fault == "reset":
                    # RST instead of FIN: the client sees ECONNRESET
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.close_connection = True
                    self.connection.close()
                    return
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                if fault:
                    status, code, message = _ERRORS[fault]
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
                self._answer(resp.status, kept, data)

            def _answer(self, status, headers, data):
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
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="fault-proxy", daemon=True)
        self._thread.start()

    def inject(self, *faults: str) -> None:
        """Queue faults for the next requests, in order."""
        unknown = set(faults) - set(_ERRORS) - {"reset"}
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}; known: reset, {', '.join(_ERRORS)}")
        with self._lock:
            self._faults.extend(faults)

    def reset_counts(self) -> None:
        with self._lock:
            self.requests.clear()
            self._faults.clear()

    def count(self, method: str | None = None) -> int:
        with self._lock:
            return sum(1 for m, *_ in self.requests if method is None or m == method)

    def _next_fault(self) -> str | None:
        with self._lock:
            return self._faults.popleft() if self._faults else None

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
