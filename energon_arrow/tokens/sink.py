"""A streaming output file that becomes visible under its name only when published.

Local and non-S3 fsspec stores: written to a temporary name in the same folder and renamed (moved) into place.
S3: streamed as a multipart upload, which the store only exposes on completion; discarding aborts it.
"""

from __future__ import annotations

import contextlib
import os
import uuid

from energon_arrow.adapters.errors import classify
from energon_arrow.adapters.publish import private_temp_path

WRITE_BUFFER = 8 * 1024 * 1024
REMOTE_PART = 16 * 1024 * 1024


class Sink:
    """Write bytes to `rel` of `storage`; `publish()` makes the file appear, `discard()` leaves no trace.
    `on_write(data)` sees every piece written (the checksums of tokens/checksums.py)."""

    def __init__(self, storage, rel: str, on_write=None):
        self.storage = storage
        self.on_write = on_write
        self.rel = rel
        self.url = storage.url_of(rel)
        self.bytes_written = 0
        try:
            if storage.is_local:
                self._final = storage.local_path(rel)
                os.makedirs(os.path.dirname(self._final) or ".", exist_ok=True)
                self._tmp = private_temp_path(self._final)
                self._file = open(self._tmp, "wb", buffering=WRITE_BUFFER)  # noqa: SIM115 (closed by publish/discard)
            elif storage.protocol == "s3":
                self._final = self._tmp = None
                self._file = storage.retrying_fs.open(storage.path_of(rel), "wb", block_size=REMOTE_PART)
            else:
                self._final = storage.path_of(rel)
                self._tmp = f"{self._final}.tmp-{uuid.uuid4().hex[:12]}"
                storage.makedirs(rel.rpartition("/")[0])
                self._file = storage.fs.open(self._tmp, "wb")
        except OSError as exc:
            raise classify(exc, self.url) from None
        self._done = False

    def write(self, data) -> None:
        try:
            self._file.write(data)
        except OSError as exc:
            raise classify(exc, self.url) from None
        if self.on_write is not None:
            self.on_write(data)

    def publish(self) -> None:
        if self._done:
            return
        self._done = True
        try:
            self.bytes_written = self._file.tell()
            self._file.close()
            if self.storage.is_local:
                os.replace(self._tmp, self._final)
            elif self._tmp is not None:
                self.storage.fs.mv(self._tmp, self._final)
        except Exception as exc:
            self._done = False
            self.discard()
            raise classify(exc, self.url) from None

    def discard(self) -> None:
        if self._done:
            return
        self._done = True
        if self._tmp is None:  # S3: abort the multipart upload
            with contextlib.suppress(Exception):
                self._file.discard()
            self._file.closed = True  # s3fs's discard leaves the file "open": its __del__ would try to flush
            return
        with contextlib.suppress(Exception):
            self._file.close()
        with contextlib.suppress(Exception):
            if self.storage.is_local:
                os.remove(self._tmp)
            else:
                self.storage.fs.rm(self._tmp)
