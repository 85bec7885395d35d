"""Consecutive-failure tracking of the user functions wrappers call (energon's ErrorContext semantics).

A failing function call is handed to the worker config's `global_error_handler` (default: log it) and the sample
is dropped; `SkipSample` drops it silently; `tolerance` failures in a row raise `FatalSampleError` (0: never).
While a wrapper re-makes a sample for `restore_sample`, failures go to `restore_error_handler` instead
(`restore_guarded`, energon's handle_restore_errors: default re-raise; when the handler returns, the item is None).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

from energon_arrow.loader.errors import SYSTEM_EXCEPTIONS, FatalSampleError
from energon_arrow.samples.errors import SkipSample, log_exception, reraise_exception


def _sources(sample: Any) -> list | None:
    src = sample.get("__sources__") if isinstance(sample, dict) else getattr(sample, "__sources__", None)
    return list(src) if src is not None else None


class ErrorContext:
    def __init__(self, name: str, worker_config, tolerance: int = 100):
        self.name = name
        self.tolerance = tolerance
        self.handler = getattr(worker_config, "global_error_handler", None) or log_exception
        self.failures = 0

    def reset(self) -> None:
        self.failures = 0

    @contextmanager
    def handle_errors(self, sample: Any):
        try:
            yield
            self.failures = 0
        except (GeneratorExit, KeyboardInterrupt, SystemExit, FatalSampleError):
            raise
        except SkipSample:
            pass
        except SYSTEM_EXCEPTIONS as exc:  # the code is broken, not the sample: never handled (as in energon)
            raise FatalSampleError(f"{self.name} failed with a system exception: {exc!r}") from exc
        except Exception as exc:
            self.handler(exc, sample, _sources(sample))
            self.failures += 1
            if self.tolerance > 0 and self.failures >= self.tolerance:
                raise FatalSampleError(
                    f"{self.name} failed {self.failures} times in a row; likely the code or the dataset is "
                    f"broken (last: {exc!r})"
                ) from exc


def restore_guarded(worker_config, sample: Any, make: Callable[[], Any]) -> Any:
    """`make()`, the re-made item of `sample`; a failure goes to `worker_config.restore_error_handler` (an
    unexpected SkipSample as a ValueError; system exceptions stay fatal) and the item is None if it returns."""
    handler = getattr(worker_config, "restore_error_handler", None) or reraise_exception
    try:
        return make()
    except SkipSample as exc:
        try:
            raise ValueError(f"unexpected SkipSample while restoring {type(sample).__name__}") from exc
        except ValueError as err:
            handler(err, sample, _sources(sample))
    except (FatalSampleError, GeneratorExit, KeyboardInterrupt, SystemExit, *SYSTEM_EXCEPTIONS):
        raise
    except Exception as exc:
        handler(exc, sample, _sources(sample))
    return None
