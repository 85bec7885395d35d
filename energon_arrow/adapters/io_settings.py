"""energon-arrow's own storage options, beside the backend's: the retry budget (`retries`, `retry_deadline_s`),
network timeouts (`connect_timeout`, `read_timeout`), the checksum every upload carries (`upload_checksum`) and
whether the loader checks the sample bytes it reads against the CRC32C prepare recorded (`verify`: "crc" or
"none", loader/verify_crc.py).

Each may also come from an environment variable (ENERGON_ARROW_RETRIES, ENERGON_ARROW_RETRY_DEADLINE_S,
ENERGON_ARROW_CONNECT_TIMEOUT, ENERGON_ARROW_READ_TIMEOUT, ENERGON_ARROW_UPLOAD_CHECKSUM, ENERGON_ARROW_VERIFY); a
storage option wins over the variable. Defaults: 4 retries (5 attempts, about 2 s of backoff), no deadline, s3fs's
timeouts (5 s to connect, 15 s without a byte), `upload_checksum="md5"`, `verify="none"` (remote token datasets:
"crc", tokens/checksums.py).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from energon_arrow.adapters.errors import InvalidStorageOptions
from energon_arrow.adapters.retry import RetryPolicy

ENVIRONMENT = {
    "retries": "ENERGON_ARROW_RETRIES",
    "retry_deadline_s": "ENERGON_ARROW_RETRY_DEADLINE_S",
    "connect_timeout": "ENERGON_ARROW_CONNECT_TIMEOUT",
    "read_timeout": "ENERGON_ARROW_READ_TIMEOUT",
    "upload_checksum": "ENERGON_ARROW_UPLOAD_CHECKSUM",
    "verify": "ENERGON_ARROW_VERIFY",
}
# what a PUT (and each multipart part) carries for the store to verify: Content-MD5 (every S3-compatible store
# checks it), x-amz-checksum-crc32 (cheaper to compute; AWS, MinIO and SeaweedFS check it, some stores ignore it),
# or nothing beyond what the transport needs
UPLOAD_CHECKSUMS = ("md5", "crc32", "none")
VERIFY_MODES = ("crc", "none")  # what the loader checks of the sample bytes it reads
_REMOTE_ONLY = ("connect_timeout", "read_timeout", "upload_checksum")


@dataclass(frozen=True)
class IoSettings:
    retries: int | None = None
    retry_deadline_s: float | None = None
    connect_timeout: float | None = None
    read_timeout: float | None = None
    upload_checksum: str = "md5"
    verify: str = "none"
    verify_from: str = "default"  # where `verify` came from: "option", "environment" or "default"

    def verify_mode(self, asked: str | None, default: str = "none") -> tuple[str, bool]:
        """(verify mode, asked for explicitly?): `asked` (a reader's argument; None: not given), else the storage
        option (explicit) or ENERGON_ARROW_VERIFY (not explicit), else `default`. Not validated."""
        if asked is not None:
            return asked, True
        if self.verify_from != "default":
            return self.verify, self.verify_from == "option"
        return default, False

    def retry_policy(self, base: RetryPolicy | None) -> RetryPolicy:
        """`base` (or the default policy) with the retry budget these settings give."""
        policy = base or RetryPolicy()
        changes: dict[str, Any] = {}
        if self.retries is not None:
            changes["attempts"] = self.retries + 1
        if self.retry_deadline_s is not None:
            changes["deadline_s"] = self.retry_deadline_s
        return dataclasses.replace(policy, **changes) if changes else policy


def pop_io_settings(raw: dict[str, Any], url: str, protocol: str, explicit_retry: bool) -> IoSettings:
    """Take energon-arrow's options out of `raw` (the rest are the backend's) and resolve them with the
    environment: options first, then the variables (the retry variables only where no RetryPolicy was given in
    code), then the defaults. For S3 the timeouts and the upload checksum are passed on to botocore (s3fs) as
    config_kwargs, so that both S3 clients behave alike."""
    given = {name: raw.pop(name) for name in ENVIRONMENT if name in raw}
    remote_only = sorted(set(given) & set(_REMOTE_ONLY))
    if remote_only and protocol != "s3":
        raise InvalidStorageOptions(url, f"{', '.join(remote_only)}: only for s3:// storage")
    values: dict[str, Any] = {}
    for name, variable in ENVIRONMENT.items():
        if name in given:
            values[name] = _parse(name, given[name], url, f"storage option {name}")
        elif variable in os.environ and not (explicit_retry and name.startswith("retr")):
            if protocol != "s3" and name in _REMOTE_ONLY:
                continue
            values[name] = _parse(name, os.environ[variable], url, f"environment variable {variable}")
    if "verify" in given:
        values["verify_from"] = "option"
    elif "verify" in values:
        values["verify_from"] = "environment"
    settings = IoSettings(**values)
    if protocol == "s3":
        _pass_to_botocore(raw, settings, url)
    return settings


def _parse(name: str, value: Any, url: str, where: str) -> Any:
    if name in ("upload_checksum", "verify"):
        choices = UPLOAD_CHECKSUMS if name == "upload_checksum" else VERIFY_MODES
        text = str(value).lower() if value not in (False, None) else "none"
        if text not in choices:
            raise InvalidStorageOptions(url, f"{where} must be one of {', '.join(choices)}, got {value!r}")
        return text
    try:
        number = float(value) if not isinstance(value, bool) else None
    except (TypeError, ValueError):
        number = None
    if name == "retries":
        if number is None or number != int(number) or number < 0:
            raise InvalidStorageOptions(url, f"{where} must be a whole number >= 0, got {value!r}")
        return int(number)
    if number is None or not number > 0 or number == float("inf"):
        raise InvalidStorageOptions(url, f"{where} must be a number of seconds > 0, got {value!r}")
    return number


def _pass_to_botocore(raw: dict[str, Any], settings: IoSettings, url: str) -> None:
    config = raw.get("config_kwargs")
    if config is not None and not isinstance(config, Mapping):
        return  # normalise_s3_options names the mistake
    config = dict(config or {})
    for name in ("connect_timeout", "read_timeout"):
        value = getattr(settings, name)
        if value is not None:
            config[name] = value
    # botocore computes x-amz-checksum-crc32 for PutObject / UploadPart by default ("when_supported"); it cannot
    # send Content-MD5 for them. Set only where it would not (as given, the options stay as the user wrote them)
    wanted = "when_required" if settings.upload_checksum == "none" else "when_supported"
    ambient = os.environ.get("AWS_REQUEST_CHECKSUM_CALCULATION", "when_supported").lower()
    if "request_checksum_calculation" not in config and wanted != ambient:
        config["request_checksum_calculation"] = wanted
    if config or "config_kwargs" in raw:
        raw["config_kwargs"] = config
