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

Host-to-device: when the loader copies the batches to a GPU, the main process registers each slot's memory with
CUDA in place, once (`pin_device`), so the transfer stage DMAs from the slot without a staging copy; the stage keeps
a slot referenced until its copy has finished, so a slot is never released (and rewritten) while it is being read.
"""

from __future__ import annotations

import math

import torch

from energon_arrow.images.scratch import DecodeScratch
from energon_arrow.loader.host_pins import HostPins

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


def _slot_tensor(value) -> torch.Tensor:
    """The slot-backed tensor of a batch field: the field itself, or the byte buffer of compressed images."""
    return value if isinstance(value, torch.Tensor) else value.data


def _attach(batch, field: str, storage: torch.UntypedStorage | None, view) -> None:
    """Put the slot tensor `view` = (shape, stride, offset, dtype) of `storage` back into the batch field (None for
    both: leave it out)."""
    t = None
    if storage is not None:
        shape, stride, offset, dtype = view
        t = torch.empty((0,), dtype=dtype).set_(storage, offset, shape, stride)
    value = getattr(batch, field)
    if value is None or isinstance(value, torch.Tensor):
        setattr(batch, field, t)
    else:  # compressed images: the buffer
        value.data = t


class SlotBoard:
    """Created by the main process before the workers start (so they share `released`); tracks what it handed
    out. `device_normalize`: image normalisation is left to the main process (after the copy to the GPU).
    `device_decode`: the workers ship compressed images, the main process decodes them (images/gpu_decode.py)."""

    def __init__(
        self,
        workers: int,
        slots: int,
        device_normalize: bool = False,
        device_decode: bool = False,
        pin_device: torch.device | None = None,
    ):
        if workers < 1 or slots < 1:
            raise ValueError(f"a slot board needs workers >= 1 and slots >= 1, got {workers}, {slots}")
        self.slots = slots
        self.device_normalize = device_normalize
        self.device_decode = device_decode
        self.pin_device = pin_device
        self.released = torch.full((workers, slots), -1, dtype=torch.int64).share_memory_()
        self._held: dict[tuple[int, int], list] = {}  # (worker, slot) -> [use, storage, released]
        self._pins: HostPins | None = None  # made in the main process on the first batch (never in a worker)

    def __getstate__(
        self,
    ) -> dict:  # what a spawned worker receives: the shared table, not the main's storages
        return {**self.__dict__, "_held": {}, "_pins": None}

    def hold(self, batch, leases: tuple) -> None:
        """Main process: a batch arrived with its slot leases ((worker, slot, use, field, view), ...); release first
        what the user has dropped since the last call. With `pin_device`, a slot's memory is registered with CUDA
        the first time it arrives (loader/host_pins.py), and unregistered when the worker replaced the slot."""
        self.release_dropped()
        if self.pin_device is not None and self._pins is None:
            self._pins = HostPins(self.pin_device)
        for w, s, u, field, view in leases:
            if view is not None:  # left out by the worker: the slot's memory is mapped here already
                _attach(batch, field, self._mapped(w, s), view)
            storage = getattr(batch, field).untyped_storage()
            old = self._held.get((w, s))
            if self._pins is not None:
                if old is not None and old[1].data_ptr() != storage.data_ptr():
                    self._pins.unpin(old[1])
                self._pins.pin(storage)
            self._held[(w, s)] = [u, storage, False]

    def _mapped(self, w: int, s: int) -> torch.UntypedStorage:
        entry = self._held.get((w, s))
        if entry is None:
            raise RuntimeError(f"internal: worker {w} sent slot {s} by reference before sending its memory")
        return entry[1]

    def release_dropped(self) -> None:
        for (w, s), entry in self._held.items():
            u, storage, done = entry
            if not done and _use_count(storage) == 1:
                self.released[w, s] = u
                entry[2] = True

    def clear(self) -> None:
        """Main process: forget every slot (the workers are gone), unregistering what was registered."""
        if self._pins is not None:
            self._pins.unpin_all(entry[1] for entry in self._held.values())
        self._held.clear()


class SlotAllocator:
    """Worker side: hands out batch tensors in this worker's slots (plain memory without a board)."""

    def __init__(self, board: SlotBoard | None, worker: int):
        self.board, self.worker = board, worker
        n = board.slots if board is not None else 0
        self.storages: list[torch.UntypedStorage | None] = [None] * n
        self.sent: list[torch.UntypedStorage | None] = [None] * n  # each slot's memory the main process maps
        self.uses = [-1] * n
        self.next = 0
        self.pending: list[tuple] = []
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
        self.pending.append((self.worker, s, last + 1, field, None))
        return torch.empty((0,), dtype=dtype).set_(storage, 0, shape, _contiguous_strides(shape))

    def take(self) -> tuple:
        """The leases of the batch just built ((worker, slot, use, field, None), ...: to send with it, through
        `sendable` from a DataLoader worker)."""
        leases, self.pending, self._undo = tuple(self.pending), [], []
        return leases

    def sendable(self, batch, leases: tuple) -> tuple:
        """In a DataLoader worker, before `batch` is sent: (batch, leases) with each slot field whose memory the
        main process maps already (sent with an earlier batch, reused since) left out of the pickle - its lease
        says how to rebuild it there (SlotBoard.hold) - so no file descriptor crosses per batch (torch's
        descriptor passing was 40% of the main process's time per batch). Records the memory it now sends."""
        out = []
        for w, s, u, field, _ in leases:
            t = _slot_tensor(getattr(batch, field))
            storage, view = self.storages[s], None
            if t.untyped_storage().data_ptr() == storage.data_ptr():
                if self.sent[s] is storage:
                    view = (tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.dtype)
                    _attach(batch, field, None, None)
                else:
                    self.sent[s] = storage
            out.append((w, s, u, field, view))
        return batch, tuple(out)

    def rollback(self) -> None:
        """The batch being built was abandoned: its slots count as unused."""
        for s, last, storage in reversed(self._undo):
            self.uses[s], self.storages[s] = last, storage
            self.next -= 1
        self.pending, self._undo = [], []
