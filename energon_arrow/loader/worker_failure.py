"""An error raised in a DataLoader worker, carried to the training process as a batch item and raised there as
itself. torch's own transport re-creates a worker's exception from a message (`Caught X in DataLoader worker N.
Original Traceback ...`): an exception whose constructor takes more than one message, like StorageError's
(url, reason), comes back as a RuntimeError, and every one starts with torch's line instead of its own (the URL,
the offset, the attempts). `failures_as_items` ends a worker's stream with a `WorkerFailure` item instead of
raising; `raise_failure` raises its error in the training process, the worker's traceback attached as a note."""

from __future__ import annotations

import pickle
import traceback
from collections.abc import Iterator
from dataclasses import dataclass

import torch


@dataclass
class WorkerFailure:
    error: Exception
    worker: int
    traceback: str


def failures_as_items(items: Iterator[tuple], item_of) -> Iterator[tuple]:
    """`items` (a worker's stream), ended by `item_of(WorkerFailure)` when it raises an exception that pickles
    and unpickles as itself (one that does not is raised, and torch reports it its way)."""
    try:
        yield from items
    except Exception as exc:
        try:  # it must come back as itself (an exception whose args do not rebuild it does not unpickle)
            back = pickle.loads(pickle.dumps(exc))
        except Exception:  # noqa: BLE001 - any failure to pickle or unpickle: torch's transport it is
            back = None
        if type(back) is not type(exc) or str(back) != str(exc):
            raise exc from None
        info = torch.utils.data.get_worker_info()
        yield item_of(WorkerFailure(exc, info.id if info is not None else 0, traceback.format_exc()))


def raise_failure(failure: WorkerFailure) -> None:
    error = failure.error
    error.add_note(f"raised in DataLoader worker {failure.worker}:\n{failure.traceback.rstrip()}")
    raise error
