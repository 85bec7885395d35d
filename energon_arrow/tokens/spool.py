"""An append-only numpy array spilled to a temporary file past a memory budget (bounded-memory index building)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np

READ_CHUNK = 1 << 22  # elements per chunk when streaming the spool back


class ArraySpool:
    """Append 1-D arrays of one dtype; read them back in order as chunks. Holds at most `memory_bytes` in RAM,
    the rest in `path` (created on first spill, removed by `close`)."""

    def __init__(self, dtype, path: str, memory_bytes: int = 8 * 1024 * 1024):
        self.dtype = np.dtype(dtype)
        self.path = path
        self.memory_bytes = memory_bytes
        self._pending: list[np.ndarray] = []
        self._pending_bytes = 0
        self._file = None
        self.size = 0  # elements appended so far

    def append(self, values) -> None:
        arr = np.asarray(values, dtype=self.dtype).reshape(-1)
        if arr.size == 0:
            return
        self._pending.append(arr)
        self._pending_bytes += arr.nbytes
        self.size += arr.size
        if self._pending_bytes >= self.memory_bytes:
            self._spill()

    def _spill(self) -> None:
        if not self._pending:
            return
        if self._file is None:
            self._file = open(self.path, "w+b")  # noqa: SIM115 (closed by close())
        for arr in self._pending:
            self._file.write(np.ascontiguousarray(arr).data)
        self._pending, self._pending_bytes = [], 0

    def chunks(self) -> Iterator[np.ndarray]:
        """Every appended element, in order, as arrays of at most READ_CHUNK elements (plus pending tails)."""
        if self._file is not None:
            self._file.flush()
            on_disk = (self.size - sum(a.size for a in self._pending)) * self.dtype.itemsize
            self._file.seek(0)
            step = READ_CHUNK * self.dtype.itemsize
            for start in range(0, on_disk, step):
                yield np.frombuffer(self._file.read(min(step, on_disk - start)), self.dtype)
        yield from self._pending

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
            os.remove(self.path)
        self._pending = []
