"""The task-encoder steps the loader calls, with energon's names: cook, encode_sample, batch, encode_batch.

`SkipSample` raised by any step drops the sample (or the batch) silently. Functions marked
`@stateless(restore_seeds=True)` are called with `random`, numpy and torch seeded from (seed,
batch, slot), so a resumed run reproduces their randomness; `@stateless(failure_tolerance=N)` functions may fail
N times (the sample is skipped and logged) before the N+1st failure is raised.
"""

from __future__ import annotations

import functools
import inspect
import logging
import random
from typing import Any

import numpy as np
import torch

from energon_arrow.loader.errors import LoaderError
from energon_arrow.loader.source import SplitSource
from energon_arrow.samples.batch import batch_samples
from energon_arrow.samples.cookers import get_cooker_need_cache, get_cooker_need_primary, select_cooker
from energon_arrow.samples.errors import SkipSample
from energon_arrow.samples.stateless import get_failure_tolerance

log = logging.getLogger(__name__)
_FAILED = object()


def _key_of(sample: Any) -> Any:
    return sample.get("__key__") if isinstance(sample, dict) else getattr(sample, "__key__", None)


@functools.lru_cache(maxsize=256)
def _keywords(cook) -> tuple[bool, frozenset]:
    """(whether `cook` takes **kwargs, its parameter names): read once per cook function, not per sample."""
    params = inspect.signature(cook).parameters
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()), frozenset(params)


def cook_kwargs(cook, source: SplitSource) -> dict:
    """The aux stores (and `primary`) a cook function asks for by keyword."""
    if get_cooker_need_cache(cook):
        raise LoaderError(
            f"{source.name}: cooker {getattr(cook, '__qualname__', cook)!r} has need_cache=True, but cache pools "
            "are not implemented (aux data is read straight from storage); drop need_cache and read from the aux "
            "file stores"
        )
    takes_all, params = _keywords(cook)
    kwargs = {k: v for k, v in source.aux.items() if takes_all or k in params}
    if "primary" in params or get_cooker_need_primary(cook):
        from energon_arrow.loader.filestore import PartStore

        if "primary" not in source.aux:
            source.aux["primary"] = PartStore(source.storage)
        kwargs["primary"] = source.aux["primary"]
    return kwargs


class TaskHooks:
    """The task-encoder steps the loader calls (energon's names): cook, encode_sample, batch, encode_batch."""

    def __init__(self, task_encoder: Any = None):
        self.te = task_encoder
        self.cookers = list(getattr(task_encoder, "cookers", ()) or ())
        self.failures: dict[str, int] = {}
        self.is_default = task_encoder is None or bool(
            getattr(task_encoder, "is_default_encoding", lambda: False)()
        )

    def sample(self, sample: Any, position_seed: int, source: SplitSource) -> list:
        if isinstance(sample, dict) and self.te is None:
            raise LoaderError(f"{source.name}: CrudeWebdataset needs a task encoder with cookers")
        if self.te is None:
            return [sample]
        if isinstance(sample, dict):
            if not self.cookers:
                raise LoaderError(
                    f"{source.name}: CrudeWebdataset found, but the task encoder has no cookers"
                )
            cooker = select_cooker(
                self.cookers, sample.get("__subflavors__"), f"{source.name} {sample['__key__']!r}"
            )
            sample = self._call(cooker.cook, sample, position_seed, **cook_kwargs(cooker.cook, source))
            if sample is _FAILED:
                return []
        out = self._call(self.te.encode_sample, sample, position_seed)
        if out is None or out is _FAILED:
            return []
        if hasattr(out, "__next__"):
            return list(out)
        return [out]

    def _call(self, fn, sample: Any, position_seed: int, **kwargs) -> Any:
        """Call a @stateless function: reseed first with restore_seeds, tolerate failure_tolerance failures."""
        if getattr(fn, "__restore_seeds__", False):
            random.seed(position_seed)
            np.random.seed(position_seed & 0xFFFFFFFF)
            torch.manual_seed(position_seed)
        tolerance = get_failure_tolerance(fn)
        try:
            return fn(sample, **kwargs)
        except SkipSample:
            return _FAILED
        except Exception as exc:
            if not tolerance:
                raise
            name = getattr(fn, "__qualname__", repr(fn))
            self.failures[name] = self.failures.get(name, 0) + 1
            if self.failures[name] > tolerance:
                raise LoaderError(
                    f"{name} failed {self.failures[name]} times (failure_tolerance={tolerance}); last on sample "
                    f"{_key_of(sample)!r}: {exc!r}"
                ) from exc
            log.warning(
                "%s failed on sample %r (%d/%d tolerated): %r",
                name,
                _key_of(sample),
                self.failures[name],
                tolerance,
                exc,
            )
            return _FAILED

    def batch(self, samples: list) -> Any:
        """The batch of `samples`, or None when the task encoder raised SkipSample for it."""
        if self.te is None:
            return batch_samples(samples)
        try:
            return self.te.encode_batch(self.te.batch(samples))
        except SkipSample:
            return None
