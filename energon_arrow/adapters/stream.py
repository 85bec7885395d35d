"""Sequential reading with large blocks fetched ahead of the reader on a small thread pool."""

from __future__ import annotations

import io
import os
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor


class PrefetchReader(io.RawIOBase):
    """A read-only, forward-only file over `fetch(offset, size) -> bytes`.

    Up to `depth` blocks of `block_size` bytes are in flight ahead of the read position, so one stream keeps
    several range requests busy (S3 throughput scales with concurrent GETs, not with one connection).
    """

    def __init__(self, fetch: Callable[[int, int], bytes], size: int, block_size: int, depth: int, name: str):
        super().__init__()
        if block_size <= 0 or depth <= 0:
            raise ValueError("block_size and depth must be positive")
        self._fetch = fetch
        self._size = size
        self._block = block_size
        self._depth = depth
        self.name = name
        self._pool = ThreadPoolExecutor(max_workers=depth, thread_name_prefix="ea-prefetch")
        self._queue: deque[tuple[int, Future]] = deque()
        self._next_fetch = 0
        self._pos = 0
        self._raw = b""
        self._buf = memoryview(b"")
        self._buf_start = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True  # forward only: seek() backwards raises io.UnsupportedOperation

    def tell(self) -> int:
        return self._pos

    @property
    def size(self) -> int:
        return self._size

    def _fill_queue(self):
        while len(self._queue) < self._depth and self._next_fetch < self._size:
            n = min(self._block, self._size - self._next_fetch)
            self._queue.append((self._next_fetch, self._pool.submit(self._fetch, self._next_fetch, n)))
            self._next_fetch += n

    def _advance_block(self) -> bool:
        self._fill_queue()
        if not self._queue:
            return False
        start, fut = self._queue.popleft()
        data = fut.result()
        expected = min(self._block, self._size - start)
        if len(data) != expected:
            raise EOFError(f"{self.name}: expected {expected} bytes at offset {start}, got {len(data)}")
        self._raw = data
        self._buf = memoryview(data)
        self._buf_start = start
        self._fill_queue()
        return True

    def readinto(self, b) -> int:
        out = memoryview(b).cast("B")
        filled = 0
        while filled < len(out):
            rel = self._pos - self._buf_start
            if rel >= len(self._buf):
                if not self._advance_block():
                    break
                continue
            n = min(len(out) - filled, len(self._buf) - rel)
            out[filled : filled + n] = self._buf[rel : rel + n]
            filled += n
            self._pos += n
        return filled

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            size = self._size - self._pos
        rel = self._pos - self._buf_start
        if rel == len(self._buf) and size >= self._block and self._pos < self._size:
            self._advance_block()  # at a block boundary: the next block may be handed out whole
            rel = 0
        if rel >= 0 and rel + size <= len(self._buf):  # fast path: inside the current block
            self._pos += size
            if rel == 0 and size == len(self._buf) and isinstance(self._raw, bytes):
                return self._raw  # a whole block: no copy
            return self._buf[rel : rel + size].tobytes()
        parts = []  # views of whole blocks, joined once: one copy per byte
        want = size
        while want > 0:
            rel = self._pos - self._buf_start
            if rel >= len(self._buf):
                if not self._advance_block():
                    break
                continue
            n = min(want, len(self._buf) - rel)
            parts.append(self._buf[rel : rel + n])
            self._pos += n
            want -= n
        return b"".join(parts)

    def skip(self, n: int) -> None:
        """Advance `n` bytes without copying them out. Bytes already fetched or in flight are stepped over;
        a target beyond them drops the read-ahead and restarts it at the target (nothing between is fetched)."""
        if n < 0:
            raise ValueError(f"{self.name}: a stream only moves forward (skip({n}))")
        target = self._pos + n
        if target > self._size:
            raise EOFError(f"{self.name}: cannot skip to offset {target} beyond end {self._size}")
        if target >= self._next_fetch:
            self._drop_queue()
            self._next_fetch = target
            self._raw, self._buf, self._buf_start = b"", memoryview(b""), target
        while target > self._buf_start + len(self._buf):
            self._pos = self._buf_start + len(self._buf)
            self._advance_block()
        self._pos = target

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Forward-only seek (SEEK_SET / SEEK_CUR), implemented by skip()."""
        target = {io.SEEK_SET: offset, io.SEEK_CUR: self._pos + offset}.get(whence)
        if target is None or target < self._pos:
            raise io.UnsupportedOperation(f"{self.name}: a stream only seeks forward")
        self.skip(target - self._pos)
        return self._pos

    def _drop_queue(self) -> None:
        for _, fut in self._queue:
            fut.cancel()
        self._queue.clear()

    def close(self):
        if not self.closed:
            self._drop_queue()
            self._pool.shutdown(wait=False, cancel_futures=True)
        super().close()


class LocalStream(io.BufferedReader):
    """A buffered local file with the stream interface of PrefetchReader (`skip`, `size`)."""

    def __init__(self, path: str, block_size: int):
        raw = io.FileIO(path, "rb")
        try:
            self._size = os.fstat(raw.fileno()).st_size
            super().__init__(raw, buffer_size=block_size)
        except BaseException:
            raw.close()
            raise

    @property
    def size(self) -> int:
        return self._size

    def skip(self, n: int) -> None:
        if n < 0:
            raise ValueError(f"{self.name}: a stream only moves forward (skip({n}))")
        target = self.tell() + n
        if target > self._size:
            raise EOFError(f"{self.name}: cannot skip to offset {target} beyond end {self._size}")
        self.seek(target)
