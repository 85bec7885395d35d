"""A loopback relay in front of SeaweedFS for the network tests of the S3 clients.

One `Relay` is, at once: a reverse proxy (origin-form requests go to the upstream server), a forwarding HTTP proxy
(absolute-URI requests), a CONNECT tunnel, and, with `tls=True`, a TLS terminator with a self-signed certificate
for localhost / 127.0.0.1 (`relay.ca_file`). It records every request and applies queued `actions` to the
next requests: answer an error, cut the body short, stall before the body, corrupt a byte of the body, or run a
callback first. `bucket_region` makes it answer 301 + `x-amz-bucket-region` to requests signed for another
region; `virtual_domain` turns virtual-hosted requests (`bucket.<domain>`) into path-style ones upstream.
"""

from __future__ import annotations

import base64
import http.client
import os
import re
import select
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import zlib
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "proxy-connection",
    "proxy-authorization",
    "te",
    "upgrade",
}


_BODY_ACTIONS = {"truncate", "stall", "corrupt"}


def self_signed_cert(folder: str) -> tuple[str, str]:
    """(cert, key) files of a one-day certificate for localhost and 127.0.0.1, made with the openssl CLI."""
    cert, key = os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem")
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            key,
            "-out",
            cert,
            "-days",
            "1",
        ]
        + ["-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True,
        capture_output=True,
    )
    return cert, key


class Relay:
    def __init__(self, upstream_url: str, tls: bool = False):
        parts = urlsplit(upstream_url)
        self.upstream = (parts.hostname, parts.port or 80)
        self.requests: list[dict] = []
        self.actions: deque = deque()
        self.bucket_region: str | None = None
        self.virtual_domain: str | None = None
        self._lock = threading.Lock()
        self._dir = tempfile.mkdtemp(prefix="ea-relay-")
        relay = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_CONNECT(self):
                relay._record(self, "tunnel")
                host, port = self.path.rsplit(":", 1)
                upstream = socket.create_connection((host, int(port)), timeout=30)
                self.send_response_only(200, "Connection established")
                self.end_headers()
                _pipe(self.connection, upstream)
                self.close_connection = True

            def relay_request(self):
                relay._handle(self)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = relay_request

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        scheme = "http"
        self.ca_file = None
        if tls:
            cert, key = self_signed_cert(self._dir)
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(cert, key)
            self._server.socket = ctx.wrap_socket(self._server.socket, server_side=True)
            self.ca_file, scheme = cert, "https"
        self.port = self._server.server_address[1]
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def queue(self, *actions) -> None:
        """Actions for the next requests, in order: ("answer", status, code), ("truncate",), ("stall", seconds),
        ("corrupt",) (flips a byte and announces the original body's CRC32), ("corrupt_request",) (flips a
        byte of the request body), ("call", fn) (runs fn, then answers
        503 SlowDown)."""
        with self._lock:
            self.actions.extend(actions)

    def count(self, method: str | None = None) -> int:
        with self._lock:
            return sum(1 for r in self.requests if method is None or r["method"] == method)

    def _record(self, handler, outcome: str) -> None:
        with self._lock:
            self.requests.append(
                {
                    "method": handler.command,
                    "target": handler.path,
                    "headers": dict(handler.headers),
                    "outcome": outcome,
                }
            )

    def _handle(self, h) -> None:
        with self._lock:
            action = self.actions[0] if self.actions else None
            if action and action[0] in _BODY_ACTIONS and h.command != "GET":
                action = None  # those wait for a GET (e.g. s3fs's HEAD before a whole-object read)
            elif action:
                self.actions.popleft()
        self._record(h, action[0] if action else "relayed")
        body = h.rfile.read(int(h.headers.get("Content-Length") or 0)) or None
        if action and action[0] == "corrupt_request" and body:
            body = bytes([body[0] ^ 0xFF]) + body[1:]
        if action and action[0] == "answer":
            return _answer(h, action[1], [("Content-Type", "application/xml")], _error_xml(action[2]))
        if action and action[0] == "call":
            action[1]()
            return _answer(h, 503, [("Content-Type", "application/xml")], _error_xml("SlowDown"))
        region = re.search(r"Credential=[^/]+/\d+/([^/]+)/", h.headers.get("Authorization", ""))
        if self.bucket_region and region and region.group(1) != self.bucket_region:
            headers = [("x-amz-bucket-region", self.bucket_region), ("Content-Type", "application/xml")]
            return _answer(h, 301, headers, _error_xml("PermanentRedirect"))
        path, host = h.path, h.headers.get("Host", "")
        if "://" in path:  # forwarding proxy: absolute-URI request line
            parts = urlsplit(path)
            path = parts.path + (f"?{parts.query}" if parts.query else "")
        name = host.split(":")[0]
        if self.virtual_domain and name.endswith("." + self.virtual_domain):
            path = "/" + name[: -len(self.virtual_domain) - 1] + path
        conn = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            headers = {k: v for k, v in h.headers.items() if k.lower() not in _HOP}
            conn.request(h.command, path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            dropped = (
                _HOP if h.command == "HEAD" else _HOP | {"content-length"}
            )  # HEAD: keep the object's size
            kept = [(k, v) for k, v in resp.getheaders() if k.lower() not in dropped]
        finally:
            conn.close()
        kind = action[0] if action else None
        if kind == "corrupt" and data:
            crc = base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()
            kept.append(("x-amz-checksum-crc32", crc))
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        _answer(h, resp.status, kept, data, kind, action[1] if kind == "stall" else 0)


def _error_xml(code: str) -> bytes:
    return f"<?xml version='1.0'?><Error><Code>{code}</Code><Message>injected</Message></Error>".encode()


def _answer(h, status, headers, data: bytes, kind=None, stall: float = 0) -> None:
    h.send_response_only(status)
    for k, v in headers:
        h.send_header(k, v)
    if h.command != "HEAD" or not any(k.lower() == "content-length" for k, _ in headers):
        h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    if h.command == "HEAD":
        return
    try:
        if kind == "truncate":
            h.wfile.write(data[: len(data) // 2])
            h.wfile.flush()
            h.close_connection = True
            return
        if kind == "stall":
            h.wfile.flush()
            time.sleep(stall)
        h.wfile.write(data)
    except OSError:  # the client gave up (a stall test)
        h.close_connection = True


def _pipe(a: socket.socket, b: socket.socket) -> None:
    socks = [a, b]
    try:
        while True:
            ready, _, _ = select.select(socks, [], [], 30)
            if not ready:
                return
            for s in ready:
                chunk = s.recv(65536)
                if not chunk:
                    return
                (b if s is a else a).sendall(chunk)
    except OSError:
        return
    finally:
        b.close()
