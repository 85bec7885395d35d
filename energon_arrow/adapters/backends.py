"""The backend clients of a `Storage`: option validation against the fsspec filesystem class, the fsspec
filesystem (rebuilt in each process), the retrying filesystem handed to libraries that do their own I/O, and the
direct S3 client (adapters.s3direct) for byte ranges. `Storage` inherits them from `Backends`."""

from __future__ import annotations

import os
from typing import Any

from energon_arrow.adapters import options as opts
from energon_arrow.adapters import secrets
from energon_arrow.adapters.errors import StorageError, UnsupportedScheme


class Backends:
    """Lazily built clients of a storage root. Needs the `Storage` attributes `_parsed`, `_public`,
    `_secret_handle`, `retry`, `io_settings`, `use_direct_reads`, `url` and `protocol`; `_forget_clients` must run before use."""

    def _forget_clients(self) -> None:
        """No client built yet (at construction and unpickling; `fs` rebuilds them after a fork)."""
        self._fs = None
        self._fs_pid = None
        self._retrying_fs = None
        self._direct_client = None

    def _validate(self, raw: dict[str, Any]) -> dict[str, Any]:
        p = self._parsed
        if p.is_local and not raw:
            return raw
        if p.protocol == "s3":
            if not p.path:
                raise StorageError(self.url, "an S3 URL needs a bucket: s3://bucket/prefix")
            return opts.normalise_s3_options(raw, self.url)
        cls = self._fs_class()
        opts.check_options_known(cls, raw, self.url)
        return raw

    def _fs_class(self):
        import fsspec

        try:
            return fsspec.get_filesystem_class(self._parsed.protocol)
        except ValueError:
            raise UnsupportedScheme(
                self.url,
                f"unknown URL scheme {self._parsed.protocol!r} (supported: local paths, file://, s3://, memory://)",
            ) from None
        except ImportError as exc:
            raise UnsupportedScheme(
                self.url, f"scheme {self._parsed.protocol!r} needs an extra package: {exc}"
            ) from None

    @property
    def fs(self):
        """The fsspec filesystem (rebuilt after fork: async clients must not cross processes)."""
        pid = os.getpid()
        if self._fs is None or self._fs_pid != pid:
            options = opts.merge_options(self._public, secrets.recall_secrets(self._secret_handle))
            try:
                fresh = bool(options.pop("skip_instance_cache", False)) or self._fs_pid is not None
                fs = self._fs_class()(skip_instance_cache=fresh, **options)
            except StorageError:
                raise
            except Exception as exc:
                raise opts.InvalidStorageOptions(
                    self.url, f"cannot create filesystem: {secrets.redact(exc, options)}"
                ) from None
            if self.protocol == "s3":
                fs.retries = 1  # s3fs's own retry loop: energon-arrow's RetryPolicy is the only one
            self._fs, self._fs_pid, self._direct_client, self._retrying_fs = fs, pid, None, None
        return self._fs

    @property
    def retrying_fs(self):
        """The fsspec filesystem for callers that go through it themselves (DuckDB, pyarrow datasets, streamed
        multipart uploads), where energon-arrow's retry loop cannot wrap each request. On S3: a second s3fs instance whose own retry loop
        makes up to `retry.attempts` tries of every request (more with a `retry.deadline_s`: s3fs_attempts), retrying exactly what energon-arrow classifies as
        transient (5xx, 429, throttling codes, resets, stalls, truncated bodies). With s3fs before 2026.2 (no
        error-handler hook) botocore's standard retry mode makes those tries instead: it retries 5xx, throttling
        codes and connection errors, not a body cut short after its headers. Elsewhere: `fs`."""
        fs = self.fs
        if self.protocol != "s3":
            return fs
        if self._retrying_fs is None:
            from energon_arrow.adapters.errors import install_s3fs_retry_classifier

            options = opts.merge_options(self._public, secrets.recall_secrets(self._secret_handle))
            options.pop("skip_instance_cache", None)
            s3fs_retries = install_s3fs_retry_classifier()
            if not s3fs_retries:
                options["config_kwargs"] = opts.botocore_retries(
                    options.get("config_kwargs"), s3fs_attempts(self.retry)
                )
            retries = s3fs_attempts(self.retry) if s3fs_retries else 1  # one retry loop, never two multiplied
            self._retrying_fs = _retrying_instance(self._fs_class(), options, retries)
        return self._retrying_fs

    @property
    def _direct(self):
        """The direct ranged-GET client (adapters.s3direct) where the options allow one, else None."""
        _ = self.fs  # resets the client after a fork
        if self.protocol != "s3" or not self.use_direct_reads:
            return None
        if self._direct_client is None:
            from energon_arrow.adapters.s3settings import direct_client_for

            options = opts.merge_options(self._public, secrets.recall_secrets(self._secret_handle))
            try:
                self._direct_client = direct_client_for(options, self.io_settings.upload_checksum) or False
            except Exception as exc:
                raise opts.InvalidStorageOptions(
                    self.url, f"cannot set up S3 access: {secrets.redact(exc, options)}"
                ) from None
        return self._direct_client or None


_RETRYING: dict[tuple, Any] = {}  # (pid, options token, retries) -> a retrying s3fs instance, oldest first


def _retrying_instance(cls, options: dict, retries: int):
    """The retrying s3fs instance for these options in this process, made once: each new instance builds a botocore
    client (service model, TLS context: 70-180 ms of CPU), which every dataset open paid again (fsspec's own
    instance cache would hand out `fs`, whose retries must stay 1)."""
    from fsspec.utils import tokenize

    key = (os.getpid(), tokenize(options), retries)
    reader = _RETRYING.get(key)
    if reader is None:
        reader = cls(skip_instance_cache=True, **options)
        reader.retries = retries
        # bounded: drop the oldest (another process's after a fork, or unused options)
        if len(_RETRYING) >= 8:
            del _RETRYING[next(iter(_RETRYING))]
        _RETRYING[key] = reader
    return reader


def s3fs_attempts(policy) -> int:
    """How many tries s3fs's own retry loop (backoff min(0.1 * 1.7**i, 15) s) makes to honour `policy`: its
    attempts, or with a deadline as many as its backoff takes to span the deadline."""
    attempts = policy.attempts
    if policy.deadline_s is not None:
        waited, tries = 0.0, 1
        while waited < policy.deadline_s:
            waited += min(0.1 * 1.7 ** (tries - 1), 15)
            tries += 1
        attempts = max(attempts, tries)
    return attempts
