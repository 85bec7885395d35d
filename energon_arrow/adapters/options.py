"""Storage options: validation and normalisation per backend (credentials are kept by adapters.secrets)."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from energon_arrow.adapters.errors import InvalidStorageOptions


def merge_options(public: Mapping[str, Any], secret: Mapping[str, Any]) -> dict[str, Any]:
    """The options with their secrets, as new dicts all the way down: s3fs and botocore change nested dicts
    they are given (config_kwargs.retries gains a "mode"), which must not change the stored options."""
    out = _copy_dicts(public)
    for k, v in secret.items():
        if k == "client_kwargs":
            out["client_kwargs"] = {**out.get("client_kwargs", {}), **_copy_dicts(v)}
        else:
            out[k] = _copy_dicts(v)
    return out


def _copy_dicts(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy_dicts(v) for k, v in value.items()}
    return value


def normalise_s3_options(options: Mapping[str, Any], url: str) -> dict[str, Any]:
    """Accept boto-style names too (aws_access_key_id, region_name) and check the rest against s3fs."""
    import s3fs

    if not isinstance(options, Mapping):
        raise InvalidStorageOptions(url, f"storage options must be a mapping, got {type(options).__name__}")
    out = dict(options)
    renames = {"aws_access_key_id": "key", "aws_secret_access_key": "secret", "aws_session_token": "token"}
    for src, dst in renames.items():
        if src in out:
            out[dst] = out.pop(src)
    for k in ("region_name", "region"):
        if k in out:
            out.setdefault("client_kwargs", {})["region_name"] = out.pop(k)
    endpoint = out.get("endpoint_url")
    if endpoint is not None and (not isinstance(endpoint, str) or "://" not in endpoint):
        raise InvalidStorageOptions(
            url, f"endpoint_url must be a URL like http://host:port, got {endpoint!r}"
        )
    for name in ("client_kwargs", "config_kwargs", "s3_additional_kwargs"):
        if name in out and not isinstance(out[name], Mapping):
            raise InvalidStorageOptions(url, f"{name} must be a mapping, got {type(out[name]).__name__}")
    for name in ("key", "secret", "token", "profile"):
        if out.get(name) is not None and not isinstance(out[name], str):
            raise InvalidStorageOptions(url, f"{name} must be a string, got {type(out[name]).__name__}")
    if ("key" in out) != ("secret" in out):
        raise InvalidStorageOptions(url, "give both key and secret (aws_access_key_id/aws_secret_access_key)")
    # botocore retries inside each call would multiply with energon-arrow's RetryPolicy: one attempt there
    # fresh metadata: another process may replace a shard between two stats (identity checks depend on it)
    out.setdefault("use_listings_cache", False)
    config = dict(out.get("config_kwargs") or {})
    config.setdefault("retries", dict(_ONE_ATTEMPT))
    out["config_kwargs"] = config
    allowed = _accepted_kwargs(s3fs.S3FileSystem) | _session_kwargs()
    unknown = sorted(set(out) - allowed)
    if unknown:
        raise InvalidStorageOptions(url, f"unknown S3 storage option(s) {unknown}; known: {sorted(allowed)}")
    return out


_ONE_ATTEMPT = {"total_max_attempts": 1}


def botocore_retries(config_kwargs: Mapping[str, Any] | None, attempts: int) -> dict[str, Any]:
    """`config_kwargs` with botocore's standard retry mode making `attempts` tries, unless the user chose the
    retries themselves (anything other than the single attempt `normalise_s3_options` sets by default)."""
    config = dict(config_kwargs or {})
    if config.get("retries", _ONE_ATTEMPT) == _ONE_ATTEMPT:
        config["retries"] = {"mode": "standard", "total_max_attempts": int(attempts)}
    return config


def _session_kwargs() -> set[str]:
    """What s3fs passes on from its **kwargs to the botocore session it creates (`profile`, `session_vars`...)."""
    from aiobotocore.session import AioSession

    params = inspect.signature(AioSession.__init__).parameters.values()
    return {p.name for p in params if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}


def check_options_known(cls, options: Mapping[str, Any], url: str) -> None:
    if not isinstance(options, Mapping):
        raise InvalidStorageOptions(url, f"storage options must be a mapping, got {type(options).__name__}")
    allowed = _accepted_kwargs(cls)
    if allowed is None:
        return
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise InvalidStorageOptions(url, f"unknown storage option(s) {unknown} for {cls.__name__}")


def _accepted_kwargs(cls) -> set[str] | None:
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        for p in inspect.signature(init).parameters.values():
            if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
                continue
            if p.name != "self":
                names.add(p.name)
    # fsspec's AbstractFileSystem accepts these through **storage_options
    names |= {
        "skip_instance_cache",
        "use_listings_cache",
        "listings_expiry_time",
        "max_paths",
        "asynchronous",
        "loop",
    }
    return names
