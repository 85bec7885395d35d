"""Building the direct S3 client (adapters.s3direct) from s3fs storage options, or stepping aside for s3fs.

The direct client is used only where it reaches the same object, with the same credentials and the same network
settings, as s3fs would: an explicit endpoint, and no option outside what it implements. Anything else (no
endpoint, requester-pays, SSE keys, a botocore setting it does not know) leaves every request to s3fs, and a
DEBUG log line on the `energon_arrow.s3` logger names the setting that decided it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import urllib.request
from collections.abc import Mapping
from typing import Any

from energon_arrow.adapters.httpconn import Connector
from energon_arrow.adapters.s3direct import DirectRangeClient

log = logging.getLogger("energon_arrow.s3")

# storage options the direct client implements (the fsspec cache settings do not concern it)
_OPTIONS = {
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
_CLIENT_KWARGS = {
    "region_name",
    "endpoint_url",
    "verify",
    "aws_access_key_id",
    "aws_secret_access_key",
    "aws_session_token",
}
# botocore Config fields; `retries` has no effect on it (energon-arrow's RetryPolicy is the one retry layer)
_CONFIG_KWARGS = {
    "retries",
    "connect_timeout",
    "read_timeout",
    "proxies",
    "region_name",
    "s3",
    "signature_version",
    "response_checksum_validation",
    "request_checksum_calculation",  # the direct client follows the `upload_checksum` storage option instead
}
_CHECKSUM_VALIDATION = ("when_supported", "when_required")  # botocore's values
_S3_CONFIG = {"addressing_style"}

_CLIENTS: dict[tuple[int, str], DirectRangeClient | None] = {}
_CLIENTS_LOCK = threading.Lock()
_BUILDING: dict[tuple[int, str], threading.Lock] = {}
os.register_at_fork(after_in_child=lambda: globals().update(_CLIENTS_LOCK=threading.Lock(), _BUILDING={}))


def direct_client_for(options: Mapping[str, Any], upload_checksum: str = "md5") -> DirectRangeClient | None:
    """The direct client for these s3fs options (one per process and options, shared by every Storage), or None
    where only s3fs can serve them. `upload_checksum`: what its PUTs carry (adapters.io_settings)."""
    # in memory only; the AWS and proxy environment (CA bundle, profile, config files...) are part of the key
    aws_env = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    settings = [options, aws_env, urllib.request.getproxies_environment(), upload_checksum]
    text = json.dumps(settings, sort_keys=True, default=str)
    cache_key = (os.getpid(), text)
    with _CLIENTS_LOCK:
        if cache_key in _CLIENTS:
            return _CLIENTS[cache_key]
        # one build per process and settings: the fetch threads that ask at once wait for it
        building = _BUILDING.setdefault(cache_key, threading.Lock())
    with building:
        with _CLIENTS_LOCK:
            if cache_key in _CLIENTS:
                return _CLIENTS[cache_key]
            parent = _CLIENTS.get((os.getppid(), text), False)
        if parent is not False and _fork_safe(parent):  # a forked child (a DataLoader worker): the parent's
            client = None if parent is None else parent.fork_copy()  # settings, new connections
        else:
            client = _build_client(options, upload_checksum)
        with _CLIENTS_LOCK:
            return _CLIENTS.setdefault(cache_key, client)


def _fork_safe(client: DirectRangeClient | None) -> bool:
    """Whether a child may copy the parent's client: static or no credentials (refreshable ones hold locks and
    refresh state that a fork may have caught mid-update; those are resolved again)."""
    from botocore.credentials import Credentials

    creds = None if client is None else client._settings[2]
    return creds is None or type(creds) is Credentials


def unsupported_setting(options: Mapping[str, Any], s3_config: Mapping[str, Any]) -> str | None:
    """The first setting the direct client does not implement, described for a log line; None if there is none.
    `s3_config` is the effective botocore `s3` config (config_kwargs.s3, else the profile's)."""
    client_kwargs = options.get("client_kwargs") or {}
    config = options.get("config_kwargs") or {}
    for what, given, known in (
        ("storage option", options, _OPTIONS),
        ("client_kwargs", client_kwargs, _CLIENT_KWARGS),
        ("config_kwargs", config, _CONFIG_KWARGS),
        ("s3 config", s3_config, _S3_CONFIG),
    ):
        extra = sorted(set(given) - known)
        if extra:
            return f"{what} {extra}"
    if config.get("signature_version") not in (None, "s3v4", "v4"):
        return f"config_kwargs.signature_version={config['signature_version']!r}"
    proxies = config.get("proxies") or urllib.request.getproxies_environment()
    for scheme in ("http", "https"):
        if (
            proxies.get(scheme)
            and not str(proxies[scheme]).startswith("http://")
            and "://" in str(proxies[scheme])
        ):
            return f"a {scheme} proxy that is not http:// (TLS to the proxy itself)"
    if not _endpoint(options):
        return "no endpoint_url (AWS endpoints are resolved by botocore)"
    if options.get("use_ssl") is False and _endpoint(options).startswith("https://"):
        return "use_ssl=False with an https endpoint"
    return None


def _endpoint(options: Mapping[str, Any]) -> str | None:
    return (
        options.get("endpoint_url")
        or (options.get("client_kwargs") or {}).get("endpoint_url")
        or os.environ.get("AWS_ENDPOINT_URL_S3")
        or os.environ.get("AWS_ENDPOINT_URL")
    )


def _build_client(options: Mapping[str, Any], upload_checksum: str) -> DirectRangeClient | None:
    import botocore.session

    client_kwargs = dict(options.get("client_kwargs") or {})
    config = dict(options.get("config_kwargs") or {})
    session = botocore.session.Session(profile=options.get("profile"))
    s3_config = config.get("s3") or session.get_config_variable("s3") or {}
    reason = unsupported_setting(options, s3_config)
    if reason is not None:
        log.debug("S3 requests go through s3fs, not the direct client: %s", reason)
        return None
    credentials = None
    if not options.get("anon"):
        key = options.get("key") or client_kwargs.get("aws_access_key_id")
        secret = options.get("secret") or client_kwargs.get("aws_secret_access_key")
        if key and secret:
            from botocore.credentials import Credentials

            token = options.get("token") or client_kwargs.get("aws_session_token")
            credentials = Credentials(key, secret, token)
        else:
            credentials = session.get_credentials()  # env, profile, SSO, web identity, instance metadata...
        # as botocore: no credentials is an error (s3fs says so), unsigned only with anon
        if credentials is None:
            log.debug("S3 requests go through s3fs, not the direct client: no credentials found")
            return None
    region = (
        client_kwargs.get("region_name")
        or config.get("region_name")
        or session.get_config_variable("region")
        or "us-east-1"
    )
    # botocore's precedence: an explicit verify, else the CA bundle of AWS_CA_BUNDLE / the profile's ca_bundle
    verify = client_kwargs.get("verify")
    if verify is None:
        verify = session.get_config_variable("ca_bundle") or True
    # botocore's setting and precedence (config_kwargs, else AWS_RESPONSE_CHECKSUM_VALIDATION / the profile):
    # "when_required" reads whole objects without asking for or checking their stored checksum
    validation = (
        config.get("response_checksum_validation")
        or session.get_config_variable("response_checksum_validation")
        or "when_supported"
    )
    if validation not in _CHECKSUM_VALIDATION:
        raise ValueError(
            f"response_checksum_validation must be one of {', '.join(_CHECKSUM_VALIDATION)}, got {validation!r}"
        )
    from s3fs import S3FileSystem

    connector = Connector(  # s3fs's default timeouts, so that both paths give up on a stalled server alike
        verify=verify,
        proxies=config.get("proxies"),
        connect_timeout=float(config.get("connect_timeout", S3FileSystem.connect_timeout)),
        read_timeout=float(config.get("read_timeout", S3FileSystem.read_timeout)),
    )
    return DirectRangeClient(
        _endpoint(options),
        region,
        credentials,
        connector=connector,
        addressing_style=s3_config.get("addressing_style", "auto"),
        verify_checksums=validation == "when_supported",
        upload_checksum=upload_checksum,
    )
