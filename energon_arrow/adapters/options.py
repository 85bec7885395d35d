"""Storage options: validation per backend and keeping credentials out of reprs, logs and pickles."""

from __future__ import annotations

import hashlib
import hmac
import inspect
import json
import logging
import os
import threading
from collections.abc import Mapping
from typing import Any

from energon_arrow.adapters.errors import InvalidStorageOptions

SECRET_KEYS = frozenset(
    {"key", "secret", "token", "aws_access_key_id", "aws_secret_access_key", "aws_session_token", "password"}
)

# Explicit credentials stay in this process; pickled storages carry only a handle to them. Forked workers
# inherit the table; a spawned process falls back to the standard AWS environment/profile.
_SECRETS: dict[str, dict[str, Any]] = {}
_SECRETS_LOCK = threading.Lock()
# a lock held by another thread at fork() would stay held forever in the child: give the child fresh ones
_WARNED: set[str] = set()
_HANDLE_KEY = os.urandom(32)  # handles are keyed hashes: they reveal nothing about the credentials


def split_secrets(options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    public, secret = {}, {}
    for k, v in options.items():
        (secret if k in SECRET_KEYS else public)[k] = v
    for k, v in list(public.get("client_kwargs", {}).items()):
        if k in SECRET_KEYS:
            secret.setdefault("client_kwargs", {})[k] = v
            public["client_kwargs"] = {kk: vv for kk, vv in public["client_kwargs"].items() if kk != k}
    return public, secret


def stash_secrets(secret: dict[str, Any]) -> str | None:
    """Keep `secret` in this process; return an opaque handle (equal credentials share one entry)."""
    if not secret:
        return None
    canonical = json.dumps(secret, sort_keys=True, default=str).encode()
    handle = hmac.new(_HANDLE_KEY, canonical, hashlib.sha256).hexdigest()[:32]
    with _SECRETS_LOCK:
        _SECRETS[handle] = secret
    _guard_library_logs()
    return handle


_LOGGER_PREFIXES = (
    "botocore",
    "aiobotocore",
    "boto3",
    "s3fs",
    "fsspec",
    "urllib3",
    "aiohttp",
    "energon_arrow",
)
_guard_lock = threading.Lock()
# a lock held by another thread at fork() would stay held forever in the child: give the child fresh ones
os.register_at_fork(
    after_in_child=lambda: globals().update(_SECRETS_LOCK=threading.Lock(), _guard_lock=threading.Lock())
)
_guarded = False


def _guard_library_logs() -> None:
    """Scrub credential values from every log record of the storage libraries (their DEBUG output shows request
    headers). A record factory sees records of loggers created later too, unlike per-logger filters."""
    global _guarded
    with _guard_lock:
        if _guarded:
            return
        previous = logging.getLogRecordFactory()

        def factory(*args, **kwargs):
            record = previous(*args, **kwargs)
            if record.name.split(".", 1)[0] in _LOGGER_PREFIXES:
                message = record.getMessage()
                clean = scrub(message)
                if clean != message:
                    record.msg, record.args = clean, None
            return record

        logging.setLogRecordFactory(factory)
        _guarded = True


def recall_secrets(handle: str | None) -> dict[str, Any]:
    if handle is None:
        return {}
    with _SECRETS_LOCK:
        found = _SECRETS.get(handle)
    if found is None:
        if handle not in _WARNED:
            _WARNED.add(handle)
            logging.getLogger("energon_arrow").warning(
                "storage credentials given as options in another process are not available here (a spawned "
                "worker): using the AWS environment / profile instead"
            )
        return {}
    return dict(found)


def secret_values() -> list[str]:
    """Every credential value held by this process (for scrubbing messages), longest first."""
    with _SECRETS_LOCK:
        tables = list(_SECRETS.values())
    values = set()
    for table in tables:
        for k, v in table.items():
            if k == "client_kwargs" and isinstance(v, Mapping):
                values.update(str(x) for x in v.values())
            elif v is not None:
                values.add(str(v))
    return sorted((v for v in values if len(v) >= 4), key=len, reverse=True)


def scrub(text: str, extra: Mapping[str, Any] | None = None) -> str:
    """`text` with every known credential value (and the secret values of `extra` options) replaced by ***."""
    values = secret_values()
    if extra:
        values += [
            str(v) for k, v in split_secrets(extra)[1].items() if k != "client_kwargs" and v is not None
        ]
    for v in values:
        if len(v) >= 4:
            text = text.replace(v, "***")
    return text


def redact(exc: BaseException, options: Mapping[str, Any] | None = None) -> str:
    """A one-line description of `exc` without credentials."""
    text = str(exc) or type(exc).__name__
    return scrub(f"{type(exc).__name__}: {text}", options)


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
