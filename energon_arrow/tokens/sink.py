"""A streaming output file that becomes visible under its name only when published.

Local: written to a temporary name in the same folder and renamed into place. Remote (S3 and other fsspec
stores): streamed as a multipart upload, which the store only exposes on completion; discarding aborts it.
"""

from __future__ import annotations

import contextlib
import os
import uuid

from energon_arrow.adapters.errors import classify

WRITE_BUFFER = 8 * 1024 * 1024
REMOTE_PART = 16 * 1024 * 1024


class Sink:
    """Write bytes to `rel` of `storage`; `publish()` makes the file appear, `discard()` leaves no trace."""

    def __init__(self, storage, rel: str):
        self.storage = storage
        self.rel = rel
        self.url = storage.url_of(rel)
        self.bytes_written = 0
        try:
            if storage.is_local:
                self._final = storage.local_path(rel)
                os.makedirs(os.path.dirname(self._final) or ".", exist_ok=True)
                self._tmp = f"{self._final}.tmp-{uuid.uuid4().hex[:12]}"
                self._file = open(self._tmp, "wb", buffering=WRITE_BUFFER)  # noqa: SIM115 (closed by publish/discard)
            else:
                self._final = self._tmp = None
                parent = rel.rpartition("/")[0]
                if parent:
                    storage.makedirs(parent)
                self._file = storage.fs.open(storage.path_of(rel), "wb", block_size=REMOTE_PART)
        except OSError as exc:
            raise classify(exc, self.url) from None
        self._done = False

    def write(self, data) -> None:
        try:
            n = self._file.write(data)
        except OSError as exc:
            raise classify(exc, self.url) from None
        self.bytes_written += memoryview(data).nbytes if n is None else n

    def publish(self) -> None:
        if self._done:
            return
        self._done = True
        try:
            self._file.close()
            if self._tmp is not None:
                os.replace(self._tmp, self._final)
        except Exception as exc:
            self._done = False
            self.discard()
            raise classify(exc, self.url) from None

    def discard(self) -> None:
        if self._done:
            return
        self._done = True
        if self._tmp is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            with contextlib.suppress(OSError):
                os.remove(self._tmp)
        else:
            discard = getattr(self._file, "discard", None)
            with contextlib.suppress(Exception):
                if discard is not None:
                    discard()
                else:  # a store without multipart abort: finish, then delete
                    self._file.close()
                    self.storage.remove(self.rel)
