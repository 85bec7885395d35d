"""Page-locking host memory in place (`cudaHostRegister`) for memory its caller keeps mapped, so host-to-device
copies DMA straight from it instead of through a pinned staging buffer (loader/transfer.py skips its staging copy
for any source whose `is_pinned()` is true, which registered memory is).

Used by the image slot board (images/slots.py): a recycled shared-memory batch slot is registered once, by the
process that maps it, the first time a batch in it arrives, and unregistered before the board drops it (the slot is
replaced or the workers are gone). Registration costs 1-10 ms per slot on an H200 host (docs/benchmarks.md), paid
once per slot instead of a staging copy per batch.

`HostPins` holds no reference to what it registered: the caller owns the memory and must call `unpin` before it
can be unmapped. Unpinning first waits for the device, so no copy that still reads the memory is in flight.
"""

from __future__ import annotations

import ctypes

import torch


def _clear_last_error() -> None:
    """Reset the CUDA runtime's last error after a refused registration: torch checks `cudaGetLastError` after its
    kernel launches and would report the refusal there. torch's runtime bindings have no such call, so it is
    looked up in the loaded libcudart (best effort: where it cannot be found, the refusal may surface later)."""
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "libcudart" in line}
    for path in paths:
        try:
            ctypes.CDLL(path).cudaGetLastError()
            return
        except OSError:
            continue


class HostPins:
    """The host ranges this process registered with CUDA, by address -> size (no references held)."""

    def __init__(self, device: torch.device):
        self.device = device
        self._ranges: dict[int, int] = {}
        self._cudart = torch.cuda.cudart()

    def __len__(self) -> int:
        return len(self._ranges)

    def pin(self, storage: torch.UntypedStorage) -> bool:
        """Register `storage`'s memory in place (once); False when the driver refuses (it then stays pageable and
        the transfer stage stages it as before)."""
        ptr, size = storage.data_ptr(), storage.nbytes()
        if ptr in self._ranges or size == 0:
            return ptr in self._ranges
        with torch.cuda.device(self.device):
            err = self._cudart.cudaHostRegister(ptr, size, 0)
        if int(err) != 0:
            _clear_last_error()
            return False
        self._ranges[ptr] = size
        return True

    def unpin(self, storage: torch.UntypedStorage) -> None:
        """Unregister `storage`'s memory (if it was registered), after every copy queued on the device is done."""
        self.unpin_all([storage])

    def unpin_all(self, storages) -> None:
        """`unpin` for each of `storages`, waiting for the device once."""
        ptrs = [s.data_ptr() for s in storages if s.data_ptr() in self._ranges]
        if ptrs:
            torch.cuda.synchronize(self.device)
        for ptr in ptrs:
            del self._ranges[ptr]
            self._cudart.cudaHostUnregister(ptr)
