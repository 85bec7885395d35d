"""Byte sources for the header walk: `read(offset, n) -> bytes` with non-decreasing offsets.

- local files: a read-only `mmap` (only the header pages are touched; payloads are never copied);
- everything else (S3, memory://): one sequential `Storage.open_stream` with large blocks fetched ahead, behind a
  sliding window, so no per-header requests are made.

`open_source(storage, rel, size, block_size)` is a context manager yielding `read`; `stream_windows(storage, rel,
window)` yields a remote object as consecutive large numpy windows for the vectorised walk.
"""

from __future__ import annotations

import contextlib
import mmap
import os

import numpy as np

from energon_arrow.adapters.errors import classify


class StreamWindow:
    """`read(offset, n)` over a forward-only stream; bytes before the last requested offset are dropped."""

    def __init__(self, stream, block_size: int):
        self._stream = stream
        self._block = block_size
        self._buf = b""
        self._base = 0  # file offset of _buf[0]
        self._eof = False

    def __call__(self, offset: int, n: int) -> bytes:
        rel = offset - self._base
        if rel + n <= len(self._buf):
            return self._buf[rel : rel + n]
        return self._refill(offset, n)

    def _refill(self, offset: int, n: int) -> bytes:
        buf_end = self._base + len(self._buf)
        if offset >= buf_end:
            self._skip(offset - buf_end)
            kept = b""
            self._base = offset
        else:
            kept = self._buf[offset - self._base :]
            self._base = offset
        parts = [kept]
        have = len(kept)
        while have < n and not self._eof:
            chunk = self._stream.read(max(self._block, n - have))
            if not chunk:
                self._eof = True
                break
            parts.append(chunk)
            have += len(chunk)
        self._buf = b"".join(parts) if len(parts) > 1 else kept
        return self._buf[:n]

    def _skip(self, count: int) -> None:
        if count <= 0:
            return
        skip = getattr(self._stream, "skip", None)
        if skip is not None:
            try:
                skip(count)
                return
            except EOFError:
                self._eof = True
                return
        while count > 0 and not self._eof:
            chunk = self._stream.read(min(count, self._block))
            if not chunk:
                self._eof = True
            count -= len(chunk)


@contextlib.contextmanager
def open_source(storage, rel: str, size: int, block_size: int = 8 << 20, depth: int = 4):
    if storage.is_local and size > 0:
        path = storage.local_path(rel)
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as exc:
            raise classify(exc, storage.url_of(rel)) from None
        try:
            mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        try:
            with contextlib.suppress(AttributeError, OSError):
                mm.madvise(mmap.MADV_SEQUENTIAL)
            yield lambda offset, n: mm[offset : offset + n]
        finally:
            mm.close()
        return
    if size == 0:
        yield lambda offset, n: b""
        return
    with storage.open_stream(rel, block_size=block_size, depth=depth) as stream:
        yield StreamWindow(stream, block_size)


def stream_windows(storage, rel: str, window: int, depth: int = 2):
    """`(offset, uint8 array)` for consecutive `window`-byte pieces of `rel` (the last one shorter), read with one
    sequential stream fetching `depth` windows ahead; close the generator to stop early."""
    with storage.open_stream(rel, block_size=window, depth=depth) as stream:
        offset = 0
        while chunk := stream.read(window):  # `window` bytes, fewer only at the end (a whole block: no copy)
            yield offset, np.frombuffer(chunk, np.uint8)
            offset += len(chunk)
