"""Staging pageable host memory into a pinned buffer in parallel chunks, each chunk handed on as soon as it (and every
chunk before it) has landed, so the host-to-device copy of a chunk overlaps the staging of the next ones.

A pageable tensor reaches the GPU through page-locked memory. Copied whole and then sent, a batch costs its memcpy
plus its DMA: one thread's memcpy moves ~20 GB/s (torch's CPU copy_ of a contiguous tensor and a plain memmove alike:
19.5-21.5 GB/s with 1 or 2 torch threads on the 2-core development machine), under half of an H200 host's
host-to-device rate (~50 GB/s), and the loader benchmark's 64 MiB row reached 0.35-0.41 of a plain pinned copy_.
Here the copy is cut into CHUNK-byte pieces moved by a few threads with `ctypes.memmove` (a foreign call, so the GIL
is released for the copy; torch's copy_ would add its own intra-op threads on top of ours), and `on_chunk(lo, hi)`
runs in the caller's thread, in order, as the pieces land: the transfer stage (loader/transfer.py) starts each
piece's DMA there.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait

import torch

CHUNK = (
    4 << 20
)  # bytes per staged piece (and per DMA): large enough for full-rate DMA, small enough to overlap


def default_stage_threads() -> int:
    """Threads staging one batch: half the cores this process may use, at most 8 (1 = copy in the caller)."""
    return max(1, min(8, len(os.sched_getaffinity(0)) // 2))


def byte_view(t: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor's memory as a flat uint8 tensor (shared)."""
    return t.reshape(-1).view(torch.uint8)


class ChunkStager:
    """Copies `src` into `dst` (same shape and dtype, `dst` contiguous) with `threads` threads; see the module
    docstring. The thread pool starts on first use and ends with `close`."""

    def __init__(self, threads: int):
        if threads < 1:
            raise ValueError(f"stage threads must be >= 1, got {threads}")
        self.threads = threads
        self._pool: ThreadPoolExecutor | None = None

    def stage(self, src: torch.Tensor, dst: torch.Tensor, on_chunk: Callable[[int, int], None]) -> None:
        nbytes = dst.numel() * dst.element_size()
        if self.threads == 1 or nbytes < 2 * CHUNK or not src.is_contiguous():
            dst.copy_(src)
            if nbytes:
                on_chunk(0, nbytes)
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="energon-arrow-stage")
        s, d = src.data_ptr(), dst.data_ptr()
        starts = range(0, nbytes, CHUNK)
        copies = [self._pool.submit(ctypes.memmove, d + lo, s + lo, min(CHUNK, nbytes - lo)) for lo in starts]
        try:
            for lo, copy in zip(starts, copies):
                copy.result()
                on_chunk(lo, min(lo + CHUNK, nbytes))
        finally:  # never leave a thread writing into memory the caller may free on an error
            wait(copies)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
