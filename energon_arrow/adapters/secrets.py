"""Credentials given as storage options: kept in this process only (pickles carry a keyed handle), and scrubbed
from messages and the storage libraries' log records."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import threading
from collections.abc import Mapping
from typing import Any

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
