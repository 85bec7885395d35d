"""Staging a pageable tensor into a pinned buffer in pieces, each piece handed on as soon as it has landed, so the
host-to-device copy of a piece overlaps the staging of the next ones.

A pageable tensor reaches the GPU through page-locked memory: copied whole and then sent, a batch costs its memcpy
plus its DMA. torch's CPU `copy_` of a contiguous tensor runs on its intra-op threads (85-130 GB/s into pinned memory
on an H200 host with 16 threads); a pool of our own threads each calling memmove on 4 MiB pieces reached only 11-45
GB/s there (2-12 threads), so each piece is a torch `copy_` in the caller's thread, and `on_chunk(lo, hi)` runs right
after it: the transfer stage (loader/transfer.py) starts that piece's DMA there.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

CHUNK = 16 << 20  # bytes per staged piece (and per DMA)


def byte_view(t: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor's memory as a flat uint8 tensor (shared)."""
    return t.reshape(-1).view(torch.uint8)


def stage_in_pieces(src: torch.Tensor, dst: torch.Tensor, on_chunk: Callable[[int, int], None]) -> None:
    """Copy `src` into `dst` (same shape and dtype, `dst` contiguous) CHUNK bytes at a time, calling
    `on_chunk(lo, hi)` after each piece's bytes landed, in order; a non-contiguous `src` is copied whole."""
    nbytes = dst.numel() * dst.element_size()
    if nbytes <= CHUNK or not src.is_contiguous():
        dst.copy_(src)
        if nbytes:
            on_chunk(0, nbytes)
        return
    s, d = byte_view(src), byte_view(dst)
    for lo in range(0, nbytes, CHUNK):
        hi = min(lo + CHUNK, nbytes)
        d[lo:hi].copy_(s[lo:hi])
        on_chunk(lo, hi)
