"""Shared-memory batch slots for decoded images, recycled between the DataLoader workers and the main process.

A worker decodes a batch's images straight into a slot: a shared-memory storage the worker allocated once and
reuses. The batch tensor crossing the DataLoader pipe is a view of that storage, so torch sends only its file
descriptor (the main process keeps the mapping, no copy); there is no per-sample tensor and no stacking.

Lifetime (enforced, not assumed): a slot is rewritten only after the main process has seen that nothing refers
to it any more. Each use of a slot has a number `u` (counted by its worker); the main process keeps the slot's
storage and, each time a batch arrives, checks the storages of the batches it handed out: when only its own
reference is left (the user dropped the batch and every view of it), it publishes `released[worker, slot] = u`
in a small shared table. A worker about to reuse a slot whose last use is not released yet leaves that memory to
its holder and allocates a fresh storage for the slot instead. So a batch the user keeps is never overwritten;
keeping many batches only costs the memory they hold.
Single writers: the use numbers are written only by the worker, the `released` table only by the main process.
"""

from __future__ import annotations

import math

import torch

from energon_arrow.images.scratch import DecodeScratch

_ALIGN = 1 << 16


def _use_count(storage: torch.UntypedStorage) -> int:
    """How many tensors / storage objects refer to `storage`'s memory (2 when torch cannot tell: never released,
    so slots are then never reused - correct, only slower)."""
    count = getattr(torch._C, "_storage_Use_Count", None)
    return 2 if count is None else count(storage._cdata)


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


class SlotBoard:
    """Created by the main process before the workers start (so they share `released`); tracks what it handed
    out. `device_normalize`: image normalisation is left to the main process (after the copy to the GPU).
    `device_decode`: the workers ship compressed images, the main process decodes them (images/gpu_decode.py)."""

    def __init__(self, workers: int, slots: int, device_normalize: bool = False, device_decode: bool = False):
        if workers < 1 or slots < 1:
            raise ValueError(f"a slot board needs workers >= 1 and slots >= 1, got {workers}, {slots}")
        self.slots = slots
        self.device_normalize = device_normalize
        self.device_decode = device_decode
        self.released = torch.full((workers, slots), -1, dtype=torch.int64).share_memory_()
        self._held: dict[tuple[int, int], list] = {}  # (worker, slot) -> [use, storage, released]

    def __getstate__(
        self,
    ) -> dict:  # what a spawned worker receives: the shared table, not the main's storages
        return {**self.__dict__, "_held": {}}

    def hold(self, batch, leases: tuple) -> None:
        """Main process: a batch arrived with its slot leases ((worker, slot, use, field), ...); release first
        what the user has dropped since the last call."""
        self.release_dropped()
        for w, s, u, field in leases:
            self._held[(w, s)] = [u, getattr(batch, field).untyped_storage(), False]

    def release_dropped(self) -> None:
        for (w, s), entry in self._held.items():
            u, storage, done = entry
            if not done and _use_count(storage) == 1:
                self.released[w, s] = u
                entry[2] = True

    def clear(self) -> None:
        """Main process: forget every slot (the workers are gone)."""
        self._held.clear()


class SlotAllocator:
    """Worker side: hands out batch tensors in this worker's slots (plain memory without a board)."""

    def __init__(self, board: SlotBoard | None, worker: int):
        self.board, self.worker = board, worker
        n = board.slots if board is not None else 0
        self.storages: list[torch.UntypedStorage | None] = [None] * n
        self.uses = [-1] * n
        self.next = 0
        self.pending: list[tuple[int, int, int, str]] = []
        self._undo: list[tuple[int, int, torch.UntypedStorage | None]] = []
        self.scratch = DecodeScratch()  # this worker's decode target (see images/scratch.py)

    def tensor(self, shape: tuple[int, ...], dtype: torch.dtype, field: str) -> torch.Tensor:
        """An uninitialised contiguous tensor for the batch field `field`."""
        if self.board is None:
            return torch.empty(shape, dtype=dtype)
        s = self.next % self.board.slots
        self.next += 1
        nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        storage, last = self.storages[s], self.uses[s]
        self._undo.append((s, last, storage))
        free = storage is not None and int(self.board.released[self.worker, s]) >= last
        if not free or storage.nbytes() < nbytes:
            size = max(_ALIGN, -(-nbytes // _ALIGN) * _ALIGN)
            storage = torch.UntypedStorage._new_shared(size)
            self.storages[s] = storage
        self.uses[s] = last + 1
        self.pending.append((self.worker, s, last + 1, field))
        return torch.empty((0,), dtype=dtype).set_(storage, 0, shape, _contiguous_strides(shape))

    def take(self) -> tuple:
        """The leases of the batch just built (to send with it)."""
        leases, self.pending, self._undo = tuple(self.pending), [], []
        return leases

    def rollback(self) -> None:
        """The batch being built was abandoned: its slots count as unused."""
        for s, last, storage in reversed(self._undo):
            self.uses[s], self.storages[s] = last, storage
            self.next -= 1
        self.pending, self._undo = [], []
