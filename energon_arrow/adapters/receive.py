"""`ReceiveBuffer`: the destination of one ranged GET, usable while its body is still arriving; `BufferPool`:
receive buffers recycled once nothing refers to them.

A GET body arrives in order, so a reader that needs the first k bytes of a window need not wait for the rest:
the body is received in blocks straight into a preallocated anonymous mapping (no intermediate `bytes`), and
`received` advances as each block lands; `wait(k)` returns once k bytes are there and raises the fetch's error if
it failed first. A retried GET resumes at `received` (its If-Match keeps it on the version already read), so
received bytes are never fetched or written again.

Windows under 1 MiB are not worth a mapping (one block arrives at once anyway, and many small mappings would
crowd the process's map count): their body is taken whole, as the `bytes` object the response gives.

The mappings are private anonymous memory. A fresh one costs a page fault per 4 KiB the first time it is written
(~5 ms per 16 MB on the 2-core benchmark machine, most of what the fetch threads spent beyond receiving), so
`BufferPool` hands out released ones again - but only a mapping that nothing but the pool refers to: a sample
view, a batch's `Spans` or an unfinished fetch keeps it out of the pool, so bytes a consumer still holds are never
overwritten.
"""

from __future__ import annotations

import http.client
import mmap
import sys
import threading

BLOCK = 512 << 10  # bytes received per step: how often `received` advances
_ALIGN = 1 << 20  # mapping sizes are rounded up to this, so released ones fit later windows
MIN_MAPPED = 1 << 20  # smaller buffers take the body's bytes whole


class ReceiveBuffer:
    """`size` bytes arriving in order into `data`: a mapping of at least `size` bytes, or for a small buffer
    (`whole`) the body's own `bytes` once it has arrived."""

    __slots__ = ("data", "size", "received", "_cond", "_error")

    def __init__(self, size: int, data: mmap.mmap | None = None):
        self.data = data if data is not None or size < MIN_MAPPED else new_mapping(size)
        self.size = size
        self.received = 0
        self._cond = threading.Condition(threading.Lock())
        self._error: BaseException | None = None

    def receive(self, readinto, n: int) -> None:
        """Receive the next `n` bytes with `readinto(view) -> count` (a response's `readinto`); fewer bytes
        than that is `http.client.IncompleteRead` (a transient error: the retry resumes where this stopped)."""
        if self.received + n > self.size:
            raise ValueError(f"{n} more bytes do not fit: {self.received} of {self.size} received")
        stop = self.received + n
        if self.data is None:
            self.data = bytearray(self.size)
        with memoryview(self.data) as view:
            while self.received < stop:
                got = readinto(view[self.received : min(stop, self.received + BLOCK)])
                if not got:
                    raise http.client.IncompleteRead(b"", stop - self.received)
                self._advance(got)

    @property
    def whole(self) -> bool:
        """Whether the body is best taken whole (`write` of the response's bytes) than received in blocks."""
        return self.data is None and not self.received

    def write(self, data) -> None:
        """Append bytes received some other way (a whole body; a small buffer keeps a whole `bytes` as is)."""
        n = len(data)
        if self.received + n > self.size:
            raise ValueError(f"{n} more bytes do not fit: {self.received} of {self.size} received")
        if self.whole and n == self.size and type(data) is bytes:
            self.data = data
        else:
            if self.data is None:
                self.data = bytearray(self.size)
            self.data[self.received : self.received + n] = data
        self._advance(n)

    def _advance(self, n: int) -> None:
        with self._cond:
            self.received += n
            self._cond.notify_all()

    def fail(self, error: BaseException) -> None:
        """The fetch gave up: every waiter raises `error`."""
        with self._cond:
            self._error = error
            self._cond.notify_all()

    def wait(self, nbytes: int) -> None:
        """Block until the first `nbytes` have arrived; raises the fetch's error if it failed before that."""
        if self.received >= nbytes and self.data is not None:
            return
        with self._cond:
            while self.received < nbytes or self.data is None:
                if self._error is not None:
                    raise self._error
                self._cond.wait()

    @property
    def complete(self) -> bool:
        return self.received >= self.size


def new_mapping(size: int) -> mmap.mmap:
    """Private anonymous memory of at least `size` bytes (rounded up to 1 MiB; pages are faulted in on use)."""
    return mmap.mmap(-1, max(_ALIGN, -(-size // _ALIGN) * _ALIGN), flags=mmap.MAP_PRIVATE)


class BufferPool:
    """Receive buffers from recycled mappings. `give(buffer, done)` returns a buffer's mapping once the caller is
    done with it; `done()` tells whether its fetch has ended (it may still be writing the bytes no reader needed).
    `take(size)` reuses the smallest released mapping that fits, has no fetch writing to it and no other
    reference (sys.getrefcount), else maps a new one. At most `limit` bytes of released mappings are kept."""

    def __init__(self, limit: int):
        self.limit = limit
        self._free: list[tuple[mmap.mmap, object]] = []  # (mapping, done() of its last fetch)
        self._lock = threading.Lock()

    def take(self, size: int) -> ReceiveBuffer:
        if size < MIN_MAPPED:
            return ReceiveBuffer(size)
        with self._lock:
            best = None
            for i, (data, done) in enumerate(self._free):
                fits = len(data) >= size and (best is None or len(data) < len(self._free[best][0]))
                if fits and done() and _unreferenced(data):
                    best = i
            data = self._free.pop(best)[0] if best is not None else None
        return ReceiveBuffer(size, data)

    def give(self, buffer: ReceiveBuffer, done) -> None:
        if type(buffer.data) is not mmap.mmap:
            return
        with self._lock:
            self._free.append((buffer.data, done))
            held = sum(len(d) for d, _ in self._free)
            while held > self.limit and self._free:
                held -= len(self._free.pop(0)[0])


def _unreferenced(data: mmap.mmap) -> bool:
    """Whether only the pool's list refers to `data`: the list's tuple, the loop's name and this argument, plus
    getrefcount's own."""
    return sys.getrefcount(data) <= 4
