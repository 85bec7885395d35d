"""energon's sample error helpers: `SkipSample` and the error handlers `log_exception` / `reraise_exception`.

A handler is called as `handler(exception, sample, sources)`; `sources` is the sample's `__sources__` as a list,
or None.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

log = logging.getLogger(__name__)


class SkipSample(Exception):
    """Raise in a task-encoder step (cook, encode_sample, batch, encode_batch) to drop the current sample or
    batch without counting it as a failure."""


def _short(value: Any, limit: int = 60) -> str:
    shape = getattr(value, "shape", None)
    if shape is not None and hasattr(value, "dtype"):
        return f"{type(value).__name__}(shape={tuple(shape)}, dtype={value.dtype})"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"<{len(value)} bytes>"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe_sample(sample: Any) -> str:
    """One line naming a sample's type and key and summarising its fields (tensor shapes, byte sizes)."""
    if isinstance(sample, dict):
        items = sample.items()
    elif dataclasses.is_dataclass(sample) and not isinstance(sample, type):
        items = ((f.name, getattr(sample, f.name)) for f in dataclasses.fields(sample))
    else:
        return _short(sample, 200)
    body = ", ".join(f"{k}={_short(v)}" for k, v in items if k not in ("__sources__", "__subflavors__"))
    return f"{type(sample).__name__}({body})"


def _sources_text(sources: list | None) -> str:
    return "".join(f"\n  source: {s}" for s in sources or ())


def log_exception(e: Exception, sample: Any, sources: list | None = None) -> None:
    """Error handler that logs the exception with its traceback, the sample's sources and a summary of it."""
    log.error(
        "%s failed on %s%s", type(e).__name__, describe_sample(sample), _sources_text(sources), exc_info=e
    )


def reraise_exception(e: Exception, _sample: Any, _sources: list | None = None) -> None:
    """Error handler that raises the exception again."""
    raise e
