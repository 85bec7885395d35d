"""Errors of the loader and sample layer. Every message names the dataset file, shard, key or part at fault."""

from __future__ import annotations

from energon_arrow.query.errors import StaleIndexError as QueryStaleIndexError


class LoaderError(Exception):
    """Bad configuration or bad input found while setting up or running the loader."""


class StaleIndexError(LoaderError, QueryStaleIndexError):
    """A shard changed since the dataset was prepared (found while reading; `open_dataset` raises the query
    layer's StaleIndexError, the base class, when it sees the change first)."""


class DecodeError(LoaderError):
    """A part could not be decoded; names the shard, the sample key and the part."""

    def __init__(self, shard: str, key: str, part: str, cause: BaseException | str):
        self.shard, self.key, self.part = shard, key, part
        super().__init__(f"{shard}: sample {key!r}: part {part!r} could not be decoded: {cause}")


class MissingPartError(LoaderError):
    """The field map names a part the sample does not have."""


class JoinerError(LoaderError):
    """The joiner of a joined dataset raised for a sample; names the primary shard, the key and the joiner."""

    def __init__(self, shard: str, key: str, joiner: str, cause: BaseException):
        self.shard, self.key = shard, key
        super().__init__(f"{shard}: sample {key!r}: the joiner {joiner} failed: {cause!r}")


class ErrorBudgetExceeded(LoaderError):
    """More samples failed than the configured error budget allows."""


class FatalSampleError(LoaderError):
    """A task-encoder hook failed too many times in a row (its failure tolerance), or with a system exception:
    the code or the dataset is broken (energon's FatalSampleError; never passed to the error handler). Raise
    `FatalSampleError.from_sample(sample, "why")` in your own code to stop at once, as in energon."""

    @classmethod
    def from_sample(cls, sample, message: str = "") -> FatalSampleError:
        from energon_arrow.samples.errors import describe_sample

        return cls(f"Sample {describe_sample(sample)} failed" + (f": {message}" if message else ""))

    @classmethod
    def from_sample_key(cls, sample_key: str) -> FatalSampleError:
        return cls(f"Sample {sample_key} failed")


# exceptions energon never hands to the error handler: they mean the code, not the sample, is broken
SYSTEM_EXCEPTIONS = (
    SystemError,
    SyntaxError,
    ImportError,
    StopIteration,
    StopAsyncIteration,
    MemoryError,
    RecursionError,
    ReferenceError,
    NameError,
    UnboundLocalError,
    FatalSampleError,
)
