"""Bounded exponential backoff for transient storage failures."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from energon_arrow.adapters.errors import StorageError, TransientError, classify

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry a transient failure. `attempts` counts the first try. With `deadline_s`,
    a request keeps being retried after its `attempts` for as long as `deadline_s` seconds have not passed since
    its first try (an outage shorter than the deadline is waited out)."""

    attempts: int = 5
    base_delay: float = 0.1
    max_delay: float = 5.0
    jitter: float = 0.25
    deadline_s: float | None = None

    def __post_init__(self):
        if self.attempts < 1:
            raise ValueError(f"RetryPolicy.attempts must be >= 1, got {self.attempts}")
        if self.base_delay < 0 or self.max_delay < 0:
            raise ValueError("RetryPolicy delays must be >= 0")
        if self.deadline_s is not None and not self.deadline_s >= 0:
            raise ValueError(f"RetryPolicy.deadline_s must be >= 0, got {self.deadline_s}")

    def delay(self, attempt: int) -> float:
        """Seconds to sleep after failed attempt number `attempt` (0-based)."""
        d = min(self.max_delay, self.base_delay * (2**attempt))
        return d * (1 + self.jitter * random.random())

    def pause_after(self, failed: int, started: float) -> float | None:
        """Seconds to wait before the next try after `failed` failed tries of a request first tried at
        `started` (time.monotonic()); None when it is time to give up."""
        pause = self.delay(failed - 1)
        if failed < self.attempts:
            return pause
        if self.deadline_s is None:
            return None
        left = self.deadline_s - (time.monotonic() - started)
        return None if left <= 0 else min(pause, left)

    def gave_up(self, failed: int, started: float) -> str:
        """How a request that is given up on was tried, for its error message."""
        if self.deadline_s is None or failed < self.attempts:
            return f"gave up after {failed} attempts"
        return f"gave up after {failed} attempts in {time.monotonic() - started:.1f} s (retry_deadline_s={self.deadline_s:g})"


def reread_attempts(storage):
    """Pauses between the reads of bytes that do not match their recorded digest or checksum (yields the
    number of failed reads so far): the storage's retry policy (remote), one more
    read without a pause (local files are not damaged on their way)."""
    started, failed = time.monotonic(), 0
    while True:
        failed += 1
        if storage.is_local:
            if failed >= 2:
                return
            yield failed
            continue
        pause = storage.retry.pause_after(failed, started)
        if pause is None:
            return
        time.sleep(pause)
        yield failed


NO_RETRY = RetryPolicy(attempts=1)


def call_with_retries(
    fn: Callable[[], T], url: str, policy: RetryPolicy, sleep=time.sleep, op: str | None = None
) -> T:
    """Run `fn`; retry TransientError-class failures per `policy`; raise a classified StorageError otherwise.
    `op` (GET, PUT, LIST...) names the operation in the error, with how many attempts were made."""
    started, failed = time.monotonic(), 0
    while True:
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - every backend error is classified below
            err = classify(exc, url)
            failed += 1
            if not isinstance(err, TransientError):
                if op is None:
                    raise err from exc
                raise with_operation(err, op, failed) from exc
            pause = policy.pause_after(failed, started)
            if pause is None:
                what = f"{op}: " if op else ""
                raise TransientError(
                    err.url, f"{what}{err.reason}; {policy.gave_up(failed, started)}"
                ) from err
            sleep(pause)


def with_operation(err: StorageError, op: str, attempts: int) -> StorageError:
    """`err` (of the same type) with the operation and, after retries, how many attempts were made."""
    tries = f" (after {attempts} attempts)" if attempts > 1 else ""
    return type(err)(err.url, f"{op}: {err.reason}{tries}")
