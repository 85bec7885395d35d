"""Opening HTTP(S) connections the way botocore does: TLS verified against the CA bundle it would use (or not at
all with verify=False), through the proxy it would use (`proxies` config or HTTP(S)_PROXY / NO_PROXY)."""

from __future__ import annotations

import base64
import http.client
import ssl
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

BLOCK = 1 << 20  # socket buffer size of the connections: bodies are sent and read in blocks of this size


@dataclass(frozen=True)
class Proxy:
    host: str
    port: int
    authorization: str | None  # a Proxy-Authorization header value, from user:password in the proxy URL

    @classmethod
    def parse(cls, url: str) -> Proxy:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(
                f"proxy URL must be http://[user:password@]host[:port], got {_hide_password(url)!r}"
            )
        auth = None
        if parts.username is not None:
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
            auth = "Basic " + base64.b64encode(pair).decode()
        return cls(parts.hostname, parts.port or 80, auth)


def _hide_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return url.replace(f":{parts.password}@", ":***@", 1)


class Connector:
    """Makes connections to `scheme://host:port` origins. Proxies come from `proxies` (botocore's Config
    format: {"http": url, "https": url}) when given, else from the environment (HTTP_PROXY, HTTPS_PROXY, NO_PROXY,
    upper or lower case, as urllib reads them). HTTPS through a proxy is tunnelled with CONNECT; plain HTTP is
    forwarded (the request line carries the absolute URL)."""

    def __init__(
        self,
        verify: bool | str = True,
        proxies: Mapping[str, str] | None = None,
        connect_timeout: float = 60.0,
        read_timeout: float = 60.0,
    ):
        self.verify = verify
        self._explicit_proxies = dict(proxies) if proxies is not None else None
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._tls: ssl.SSLContext | None = None
        for url in (self._explicit_proxies or {}).values():
            Proxy.parse(url)  # a malformed proxy fails when the client is built

    def proxy_for(self, scheme: str, host: str) -> Proxy | None:
        if self._explicit_proxies is not None:
            url = self._explicit_proxies.get(scheme)
            return Proxy.parse(url) if url else None
        env = urllib.request.getproxies_environment()
        url = env.get(scheme)
        if not url or urllib.request.proxy_bypass_environment(host, env):
            return None
        return Proxy.parse(url)

    def tls_context(self) -> ssl.SSLContext:
        if self._tls is None:
            if self.verify is False:
                ctx = ssl.create_default_context()
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            else:
                try:
                    ctx = ssl.create_default_context(
                        cafile=self.verify if isinstance(self.verify, str) else None
                    )
                except (OSError, ssl.SSLError) as exc:
                    raise ValueError(f"cannot load the CA bundle {self.verify!r}: {exc}") from None
            self._tls = ctx
        return self._tls

    def connect(self, scheme: str, host: str, port: int) -> Route:
        """An open connection to the origin `scheme://host:port`, directly or through its proxy."""
        proxy = self.proxy_for(scheme, host)
        if scheme == "https":
            at = (host, port) if proxy is None else (proxy.host, proxy.port)
            conn = http.client.HTTPSConnection(
                *at, timeout=self.connect_timeout, context=self.tls_context(), blocksize=BLOCK
            )
            if proxy is not None:
                headers = {"Proxy-Authorization": proxy.authorization} if proxy.authorization else None
                conn.set_tunnel(host, port, headers=headers)
            route = Route(conn, "", {})
        elif proxy is None:
            route = Route(
                http.client.HTTPConnection(host, port, timeout=self.connect_timeout, blocksize=BLOCK)
            )
        else:
            conn = http.client.HTTPConnection(
                proxy.host, proxy.port, timeout=self.connect_timeout, blocksize=BLOCK
            )
            auth = {"Proxy-Authorization": proxy.authorization} if proxy.authorization else {}
            route = Route(conn, f"http://{host}:{port}", auth)
        route.conn.connect()
        route.conn.sock.settimeout(self.read_timeout)  # a response that sends no byte for this long times out
        return route


@dataclass
class Route:
    """An open connection, the prefix its request targets need ("" or, through a forwarding proxy, the origin
    "http://host:port") and the headers the proxy wants (not signed: they are for the proxy)."""

    conn: http.client.HTTPConnection
    target_prefix: str = ""
    proxy_headers: dict[str, str] = field(default_factory=dict)
