"""Encoded samples on their way from a DataLoader worker to the main process (stream mode: the loader regroups,
packs and batches them there, energon/regroup.py).

torch pickles what a worker returns in a background thread of its result queue; an object that cannot be pickled
is reported there, dropped, and the main process then waits for it forever. So a worker pickles its samples
itself, exactly as torch would (`ForkingPickler`: tensors go to shared memory), and a sample that cannot be sent
becomes an error of the worker's iteration, which torch raises in the main process. The main process unpickles
them once (`received`)."""

from __future__ import annotations

import pickle
from multiprocessing.reduction import ForkingPickler
from typing import Any

from energon_arrow.loader.errors import LoaderError


class PickledSamples:
    """A worker's chunk of encoded samples, already pickled (`load()` in the main process)."""

    __slots__ = ("blob",)

    def __init__(self, blob: bytes):
        self.blob = blob

    def load(self) -> Any:
        return pickle.loads(self.blob)


def _key(sample: Any) -> Any:
    return sample.get("__key__") if isinstance(sample, dict) else getattr(sample, "__key__", None)


def sendable(samples: Any, chunk: int) -> PickledSamples:
    """`samples` (chunk `chunk`) pickled for the main process; a clear error naming the sample that cannot be."""
    try:
        return PickledSamples(bytes(ForkingPickler.dumps(samples)))
    except Exception as exc:  # noqa: BLE001 - re-raised with the sample named
        culprit = None
        for sample in samples if isinstance(samples, (list, tuple)) else ():
            try:
                ForkingPickler.dumps(sample)
            except Exception:  # noqa: BLE001
                culprit = sample
                break
        which = f"sample {_key(culprit)!r}" if culprit is not None else "a sample"
        raise LoaderError(
            f"{which} of chunk {chunk} cannot be sent to the main process (the loader regroups, packs and batches "
            f"encoded samples there): {type(exc).__name__}: {exc}. With DataLoader workers the samples that "
            "encode_sample / the cookers return must be picklable (a Lazy of a FileStoreCachePool or NoCachePool "
            "is; a lambda, a lock or an open file is not)"
        ) from exc


def received(samples: Any) -> Any:
    """What a worker sent, unpickled (samples from the main process's own iteration pass as they are)."""
    return samples.load() if isinstance(samples, PickledSamples) else samples
