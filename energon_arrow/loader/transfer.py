"""Host-to-device transfer stage shared by every loader (WebDataset loader, Nanoset token loader).

`DeviceTransfer` takes batches that are nested dicts / lists / tuples / dataclasses of tensors (other leaves pass through
untouched) and hands them back on the target device.

- With CUDA available (and a CUDA target device): each pageable leaf is copied into a *preallocated pinned*
  host buffer set (allocated on first use per layout, reused afterwards), then copied to the GPU with
  `non_blocking=True` on a side stream. A leaf already in page-locked memory (`is_pinned()`: pinned tensors, and
  image batch slots registered in place by their board, loader/host_pins.py) is copied straight from where it is,
  and the stage keeps it referenced until its copy has finished (so its owner cannot recycle it early).
  `depth` buffer sets rotate (double-buffered by default), so the copy of batch i+1 overlaps the consumer's
  compute on batch i. The consumer stream waits on the copy event before the
  batch is returned, and the device tensors are `record_stream`-ed so the caching allocator never recycles them
  early.
- A leaf broadcast over the batch (batch stride 0) crosses as its one row and is expanded again on the device.
- Without CUDA (or with a CPU target): the same iterator protocol runs without pinning, streams or warnings; the
  batches are returned as they are (already on the host).

`iter_to_device(batches, device)` wraps an iterator with `depth` batches in flight.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable, Iterator
from typing import Any

import torch


def _leaves(obj: Any, out: list[torch.Tensor]) -> None:
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            _leaves(v, out)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _leaves(v, out)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            _leaves(getattr(obj, f.name), out)


def _rebuild(obj: Any, it: Iterator[torch.Tensor]) -> Any:
    if isinstance(obj, torch.Tensor):
        return next(it)
    if isinstance(obj, dict):
        rebuilt = {k: _rebuild(v, it) for k, v in obj.items()}
        return rebuilt if type(obj) is dict else type(obj)(rebuilt)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple
        return type(obj)(*(_rebuild(v, it) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(_rebuild(v, it) for v in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(
            obj, **{f.name: _rebuild(getattr(obj, f.name), it) for f in dataclasses.fields(obj)}
        )
    return obj


def tensor_leaves(obj: Any) -> list[torch.Tensor]:
    """All tensors in a nested dict/list/tuple, depth first, in insertion order."""
    out: list[torch.Tensor] = []
    _leaves(obj, out)
    return out


def replace_leaves(obj: Any, tensors: Iterable[torch.Tensor]) -> Any:
    """`obj` with its tensor leaves replaced, in `tensor_leaves` order, by `tensors`."""
    return _rebuild(obj, iter(tensors))


def cuda_target(device: str | torch.device | None) -> torch.device | None:
    """The CUDA device to copy to, or None when batches stay on the host (no CUDA, or a CPU target)."""
    if device is None:
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else None
    dev = torch.device(device)
    if dev.type != "cuda":
        return None
    if not torch.cuda.is_available():
        raise RuntimeError(f"device {dev} requested but CUDA is not available on this machine")
    return dev if dev.index is not None else torch.device("cuda", torch.cuda.current_device())


def sent_part(t: torch.Tensor) -> torch.Tensor:
    """What crosses to the device for a leaf: the whole tensor, or for a batch-broadcast leaf (batch stride 0, such
    as the Nanoset's shared causal mask, position ids or loss mask) its one row, expanded back on the device, so a
    [B, 1, L, L] mask costs one L x L copy instead of B."""
    if t.dim() and t.shape[0] > 1 and t.stride(0) == 0:
        return t[:1]
    return t


class _PinnedSet:
    """One set of pinned host buffers for one batch layout (shapes + dtypes of the tensor leaves)."""

    def __init__(self, layout: tuple):
        self.layout = layout
        self.buffers = [torch.empty(shape, dtype=dtype, pin_memory=True) for shape, dtype in layout]
        self.event: torch.cuda.Event | None = None


class DeviceTransfer:
    """Copies nested tensor batches host -> device through rotating pinned buffers on a side stream."""

    def __init__(self, device: str | torch.device | None = None, depth: int = 2):
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self.device = cuda_target(device)
        self.depth = depth
        self._sets: list[_PinnedSet | None] = [None] * depth
        self._slot = 0
        self._stream = torch.cuda.Stream(device=self.device) if self.device is not None else None
        self._reading: collections.deque = collections.deque()  # (event, pinned-in-place sources being read)

    @property
    def enabled(self) -> bool:
        """True when batches are really copied to a GPU (pinned, side stream)."""
        return self.device is not None

    def _pinned_for(self, layout: tuple) -> _PinnedSet:
        slot = self._slot
        self._slot = (slot + 1) % self.depth
        current = self._sets[slot]
        if current is not None and current.event is not None:
            current.event.synchronize()  # the copy that last used this slot has finished reading it
        if current is None or current.layout != layout:
            current = _PinnedSet(layout)
            self._sets[slot] = current
        return current

    def start(self, batch: Any) -> Any:
        """Begin the copy of `batch`; returns a handle for `finish`. On the host path the handle is the batch."""
        if self.device is None:
            return batch
        self.release_finished()
        leaves = tensor_leaves(batch)
        if not leaves:  # nothing to copy (compressed images are decoded on the device later)
            return batch, None, None, None
        sends = [sent_part(t) for t in leaves]
        in_place = [t.is_pinned() for t in sends]
        srcs = list(sends)
        if not all(in_place):  # stage what is pageable in this slot's pinned buffers
            staged = [(i, t) for i, t in enumerate(sends) if not in_place[i]]
            pinned = self._pinned_for(tuple((tuple(t.shape), t.dtype) for _, t in staged))
            for buf, (i, t) in zip(pinned.buffers, staged):
                buf.copy_(t)
                srcs[i] = buf
        with torch.cuda.stream(self._stream):
            outs = [s.to(self.device, non_blocking=True) for s in srcs]
            event = torch.cuda.Event()
            event.record(self._stream)
        if not all(in_place):
            pinned.event = event
        if any(in_place):  # DMA straight from the caller's pinned memory: keep it referenced until read
            self._reading.append((event, [t for t, p in zip(sends, in_place) if p]))
        return batch, outs, event, [t.shape for t in leaves]

    def release_finished(self) -> None:
        """Drop the references to pinned-in-place sources whose copies have finished. A recycled batch slot is
        handed back to its worker only once nothing refers to it (images/slots.py), so a slot is never
        rewritten while a copy still reads it."""
        while self._reading and self._reading[0][0].query():
            self._reading.popleft()

    def finish(self, handle: Any) -> Any:
        """The batch on the target device; the current stream waits for its copy."""
        if self.device is None:
            return handle
        batch, outs, event, shapes = handle
        if event is None:
            return batch
        current = torch.cuda.current_stream(self.device)
        current.wait_event(event)
        for t in outs:
            t.record_stream(current)
        return replace_leaves(batch, [o.expand(shape) for o, shape in zip(outs, shapes)])

    def __call__(self, batch: Any) -> Any:
        return self.finish(self.start(batch))


def iter_to_device(
    batches: Iterable[Any], device: str | torch.device | None = None, depth: int = 2
) -> Iterator[Any]:
    """Yield `batches` on `device`, keeping up to `depth` copies in flight ahead of the consumer."""
    transfer = DeviceTransfer(device, depth)
    if not transfer.enabled:
        yield from batches
        return
    pending: collections.deque = collections.deque()
    for batch in batches:
        pending.append(transfer.start(batch))
        if len(pending) >= depth:
            yield transfer.finish(pending.popleft())
    while pending:
        yield transfer.finish(pending.popleft())
