"""Byte sources for the header walk: `read(offset, n) -> bytes` with non-decreasing offsets.

- local files: a read-only `mmap` (only the header pages are touched; payloads are never copied);
- everything else (S3, memory://): one sequential `Storage.open_stream` with large blocks fetched ahead, behind a
  sliding window, so no per-header requests are made.

`open_source(storage, rel, size, block_size)` is a context manager yielding `read`, whose `read.crc(offset, n)`
gives the CRC32C of n bytes at `offset` from the same source (the payload after the header just read: the
stream passes through it once, as it does when skipping it); `stream_windows(storage, rel, window)` yields a
remote object as consecutive large numpy windows for the vectorised walk.
"""

from __future__ import annotations

import contextlib
import mmap
import os

import numpy as np

from energon_arrow.adapters.errors import classify
from energon_arrow.tar.crc import crc32c


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

    def crc(self, offset: int, n: int) -> int:
        """CRC32C of bytes [offset, offset + n), read on through the stream a block at a time."""
        value, pos, end = 0, offset, offset + n
        while pos < end:
            rel = pos - self._base
            if rel < 0 or rel >= len(self._buf):
                self._fill(pos, min(end - pos, self._block))
                rel = 0
                if not self._buf:
                    break  # the stream ended early: the walk reports the truncation
            take = min(end - pos, len(self._buf) - rel)
            with memoryview(self._buf) as view:
                value = crc32c(view[rel : rel + take], value)
            pos += take
        return value

    def _refill(self, offset: int, n: int) -> bytes:
        self._fill(offset, n)
        return self._buf[:n]

    def _fill(self, offset: int, n: int) -> None:
        """Make the buffer start at `offset` and hold at least n bytes (fewer at the end of the stream)."""
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
            with memoryview(mm) as view:  # released before the close
                yield _Mapped(mm, view)
        finally:
            mm.close()
        return
    if size == 0:
        yield _Mapped(b"", memoryview(b""))
        return
    with storage.open_stream(rel, block_size=block_size, depth=depth) as stream:
        yield StreamWindow(stream, block_size)


class _Mapped:
    """`read` (and `read.crc`) over bytes held whole: a memory map or a buffer."""

    def __init__(self, data, view: memoryview):
        self.data, self.view = data, view

    def __call__(self, offset: int, n: int) -> bytes:
        return self.data[offset : offset + n]

    def crc(self, offset: int, n: int) -> int:
        return crc32c(self.view[offset : offset + n])


def in_memory(data) -> _Mapped:
    """`read`/`read.crc` over a buffer (a shard read whole)."""
    return _Mapped(data, memoryview(data))


def stream_windows(storage, rel: str, window: int, depth: int = 2):
    """`(offset, uint8 array)` for consecutive `window`-byte pieces of `rel` (the last one shorter), read with one
    sequential stream fetching `depth` windows ahead; close the generator to stop early."""
    with storage.open_stream(rel, block_size=window, depth=depth) as stream:
        offset = 0
        while chunk := stream.read(window):  # `window` bytes, fewer only at the end (a whole block: no copy)
            yield offset, np.frombuffer(chunk, np.uint8)
            offset += len(chunk)
