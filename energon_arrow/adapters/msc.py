"""`msc://profile/path` URLs: energon's multi-storage-client scheme.

A profile from the user's MSC configuration (MSC_CONFIG, ~/.msc_config.yaml, ... as multi-storage-client finds
it) whose storage is S3 (`s3`, `s8k`) or a POSIX folder (`file`) is read the way energon-arrow reads `s3://`
URLs and local paths: `resolve_msc_url` turns it into that URL plus storage options (endpoint, region, static
credentials or the AWS profile, TLS verification, botocore timeouts), so the ranged reads, windows, retries and
cache apply. Options that only tune multi-storage-client's own transfers (multipart sizes, concurrency, its retry
loop) have no counterpart and are not carried. Every other profile (other stores, credential providers,
replicas, metadata providers, caching, options not known here) is read through multi-storage-client's own fsspec
filesystem: correct, without energon-arrow's S3 fast path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from energon_arrow.adapters.errors import StorageError

MSC_PREFIX = "msc://"
_S3_TYPES = ("s3", "s8k")
# multi-storage-client tuning of its own transfers and retries: energon-arrow's reader has its own
_MSC_ONLY_OPTIONS = frozenset(
    {
        "multipart_threshold",
        "multipart_chunksize",
        "max_concurrency",
        "io_chunksize",
        "checksum_algorithm",
        "retries",
        "rust_client",
        "transfer_manager_type",
    }
)
_BOTOCORE_OPTIONS = (
    "connect_timeout",
    "read_timeout",
    "max_pool_connections",
    "request_checksum_calculation",
    "response_checksum_validation",
    "s3",
)
_PROFILE_KEYS = frozenset(
    {"storage_provider", "credentials_provider", "retry", "autocommit", "caching_enabled"}
)


def split_msc_url(url: str) -> tuple[str, str]:
    """`msc://profile/a/b` -> ("profile", "a/b")."""
    rest = url[len(MSC_PREFIX) :]
    profile, _, path = rest.partition("/")
    if not profile:
        raise StorageError(url, "an msc:// URL names a profile: msc://PROFILE/path")
    return profile, path.strip("/")


def _msc_config(url: str) -> dict[str, Any]:
    try:
        from multistorageclient.config import StorageClientConfig
        from multistorageclient.utils import expand_env_vars
    except ImportError:
        raise StorageError(
            url, "msc:// URLs need multi-storage-client: pip install 'energon-arrow[msc]'"
        ) from None
    try:
        config, _ = StorageClientConfig.read_msc_config()
    except ValueError as exc:
        raise StorageError(url, f"cannot read the multi-storage-client configuration: {exc}") from None
    return expand_env_vars(config or {})


def _s3_options(profile: Mapping[str, Any], provider: Mapping[str, Any]) -> dict[str, Any] | None:
    """Storage options equal to an S3 profile, or None where the profile needs multi-storage-client itself."""
    out: dict[str, Any] = {}
    client: dict[str, Any] = {}
    config: dict[str, Any] = {}
    for key, value in provider.items():
        if key == "base_path" or key in _MSC_ONLY_OPTIONS:
            continue
        if key == "endpoint_url":
            out["endpoint_url"] = value
        elif key == "region_name":
            client["region_name"] = value
        elif key == "verify":
            client["verify"] = value
        elif key == "profile_name":
            out["profile"] = value
        elif key in _BOTOCORE_OPTIONS:
            config[key] = value
        else:
            return None
    credentials = profile.get("credentials_provider")
    if credentials:
        if credentials.get("type") != "S3Credentials":
            return None
        given = credentials.get("options") or {}
        out["key"], out["secret"] = given.get("access_key"), given.get("secret_key")
        if given.get("session_token"):
            out["token"] = given["session_token"]
    if client:
        out["client_kwargs"] = client
    if config:
        out["config_kwargs"] = config
    return out


def resolve_msc_url(url: str, storage_options: Mapping[str, Any] | None) -> tuple[str, dict[str, Any]]:
    """The `s3://` URL or local path (and storage options) an msc:// URL names, where its profile is one
    energon-arrow reads natively; otherwise the msc:// URL unchanged (read through multi-storage-client).
    Storage options given by the caller win over the profile's."""
    profile_name, path = split_msc_url(url)
    profile = (_msc_config(url).get("profiles") or {}).get(profile_name)
    given = dict(storage_options or {})
    if not isinstance(profile, Mapping) or set(profile) - _PROFILE_KEYS or profile.get("caching_enabled"):
        return url, given  # its cache, replicas, metadata or bundle are multi-storage-client's to apply
    provider = profile.get("storage_provider") or {}
    kind, options = provider.get("type"), dict(provider.get("options") or {})
    base = str(options.get("base_path") or "").strip("/")
    if kind == "file" and not profile.get("credentials_provider") and set(options) <= {"base_path"}:
        return "/" + "/".join(p for p in (base, path) if p), given
    if kind in _S3_TYPES and base:
        mapped = _s3_options(profile, options)
        if mapped is not None:
            return "s3://" + "/".join(p for p in (base, path) if p), {**mapped, **given}
    return url, given
