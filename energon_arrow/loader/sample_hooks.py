"""What the core loader calls per sample and per batch (`SampleHooks`), and its plain implementation.

The core (loader/assemble.py, loader/dataset.py, images/gpu_decode.py) builds samples and batches and calls a
hooks object its caller hands to `BatchDataset(hooks=...)`: `sample()` turns a loaded sample into the samples that
go into the batch, `batch()` makes the batch, `loaded()` / `load_failed()` report samples that loaded or did not.
`PlainHooks` (the default) keeps samples as they are and collates them with `batch_samples`; a sample that does
not load goes to `log_exception` and is skipped, fatal after LOAD_FAILURE_TOLERANCE in a row. The energon layer's
task-encoder hooks (energon_arrow/energon/hooks.py, `TaskHooks`) implement the same protocol.

Also here, for both: `position_seeds` (the per-sample seeds of a batch), `ErrorCounter` (consecutive failures of
one hook, energon's ErrorContext) and `sources_of`.
"""

from __future__ import annotations

from typing import Any, Protocol

from energon_arrow.loader.errors import SYSTEM_EXCEPTIONS, FatalSampleError, LoaderError
from energon_arrow.samples.batch import batch_samples
from energon_arrow.samples.errors import describe_sample, log_exception


class SampleHooks(Protocol):
    """What the core calls; see the module docstring."""

    #: the task encoder the hooks call (None: none), named in `BatchDataset.config()`
    te: Any
    #: True: samples are kept as built, so batches may be assembled column by column (loader/assemble.py)
    is_default: bool
    #: True: `batch()` returns the samples themselves (batches are formed later, by the caller's loader)
    stream: bool

    def loaded(self) -> None: ...

    def load_failed(self, exc: Exception, sample: Any) -> None: ...

    def sample(self, sample: Any, b: int, slot: int, source: Any) -> list: ...

    def batch(self, samples: list, b: int = 0) -> Any: ...


def sources_of(sample: Any) -> list | None:
    """A sample's (or batch's) `__sources__` as a list, None when it has none."""
    src = sample.get("__sources__") if isinstance(sample, dict) else getattr(sample, "__sources__", None)
    if src is None and isinstance(sample, list):
        src = [s for item in sample for s in (sources_of(item) or ())] or None
    return list(src) if src is not None else None


LOAD_FAILURE_TOLERANCE = 100


class ErrorCounter:
    """Consecutive failures of one hook (energon's ErrorContext): handler per failure, fatal at `tolerance`."""

    def __init__(self, name: str, tolerance: int):
        self.name, self.tolerance, self.in_a_row = name, tolerance, 0

    def failed(self, exc: Exception, sample: Any, handler) -> None:
        if isinstance(exc, SYSTEM_EXCEPTIONS):
            raise FatalSampleError(
                f"{self.name} failed on {describe_sample(sample)} with a system exception: {exc!r}"
            ) from exc
        handler(exc, sample, sources_of(sample))
        self.in_a_row += 1
        if self.tolerance > 0 and self.in_a_row >= self.tolerance:
            raise FatalSampleError(
                f"{self.name} failed {self.in_a_row} times in a row (failure_tolerance={self.tolerance}); "
                f"last on {describe_sample(sample)}: {exc!r}. Likely your code or dataset are broken."
            ) from exc


SEED_STRIDE, BATCH_STRIDE = 1_000_003, 65_537


def position_seeds(seed: int, b: int, n: int) -> list[int]:
    """The per-sample seeds of the n samples of batch b (task-encoder reseeding, random image crops)."""
    base = seed * SEED_STRIDE + b * BATCH_STRIDE
    return list(range(base, base + n))


class PlainHooks:
    """The hooks of a `BatchDataset` made without any: samples as built, collated with `batch_samples`."""

    te = None
    is_default = True
    stream = False

    def __init__(self):
        self._load = ErrorCounter("load_sample", LOAD_FAILURE_TOLERANCE)

    def loaded(self) -> None:
        """Samples loaded: the run of load failures is over."""
        self._load.in_a_row = 0

    def load_failed(self, exc: Exception, sample: Any) -> None:
        """A sample did not load: logged (`log_exception`) and skipped; FatalSampleError after
        LOAD_FAILURE_TOLERANCE failures in a row."""
        self._load.failed(exc, sample, log_exception)

    def sample(self, sample: Any, b: int, slot: int, source: Any) -> list:
        if isinstance(sample, dict):
            raise LoaderError(f"{source.name}: CrudeWebdataset needs a task encoder with cookers")
        return [sample]

    def batch(self, samples: list, b: int = 0) -> Any:
        return batch_samples(samples)
