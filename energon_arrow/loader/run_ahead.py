"""Run a pipeline stage ahead of its consumer in a background thread: `run_ahead(items, work, stream, depth)` yields
`(mark, work(value))` for each `(mark, value)` of `items`, computed up to `depth` items ahead.

Used by the `Loader` for `image_device_decode=True` (loader.py), twice: one thread takes the next batches from the
DataLoader workers, another decodes them (torchvision's decode_jpeg, which gives the GIL up and takes it back many
times per call: docs/benchmarks.md, Images) while the training thread consumes the previous one. The marks carry
the loader's state as of each item, applied by the consumer when the item is delivered, so a thread running ahead
never moves the state.

On CUDA the work runs on `stream` (a side stream; stages that feed each other can share one); the consumer's
stream waits for an item's event before the item is handed over, and every CUDA tensor of the item is
`record_stream`-ed on the consumer's stream. A value of None is passed through without `work` (the loader's
end-of-pass mark). An exception in the thread is raised in the
consumer; closing the consumer stops the thread and closes `items` in it (which shuts the DataLoader down).
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch

from energon_arrow.loader.transfer import tensor_leaves

_DONE = object()


class _Failed:
    def __init__(self, exc: BaseException):
        self.exc = exc


def run_ahead(
    items: Iterator[tuple[Any, Any]],
    work: Callable[[Any], Any],
    stream: torch.cuda.Stream | None,
    depth: int = 2,
) -> Iterator[tuple[Any, Any]]:
    """See the module docstring. `stream`: the CUDA stream the work runs on (None: no streams)."""
    out: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                out.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
                for mark, value in items:
                    done = work(value) if value is not None else None
                    event = stream.record_event() if stream is not None else None
                    if not put((mark, done, event)):
                        return
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            put(_Failed(exc))
        finally:
            try:
                close = getattr(items, "close", None)  # a generator: its cleanup runs here, in its own thread
                if close is not None:
                    close()
            finally:
                put(_DONE)

    thread = threading.Thread(target=produce, name="energon-arrow-run-ahead", daemon=True)
    thread.start()
    try:
        while True:
            item = out.get()
            if item is _DONE:
                return
            if isinstance(item, _Failed):
                raise item.exc
            mark, done, event = item
            if event is not None:
                current = torch.cuda.current_stream(stream.device)
                current.wait_event(event)
                for t in tensor_leaves(done):
                    if t.is_cuda:
                        t.record_stream(current)
            yield mark, done
    finally:
        stop.set()
        while thread.is_alive():
            with contextlib.suppress(queue.Empty):
                out.get(timeout=0.05)
        thread.join()
