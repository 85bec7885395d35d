"""Bounded exponential backoff for transient storage failures."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from energon_arrow.adapters.errors import TransientError, classify

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry a transient failure. `attempts` counts the first try."""

    attempts: int = 5
    base_delay: float = 0.1
    max_delay: float = 5.0
    jitter: float = 0.25

    def __post_init__(self):
        if self.attempts < 1:
            raise ValueError(f"RetryPolicy.attempts must be >= 1, got {self.attempts}")
        if self.base_delay < 0 or self.max_delay < 0:
            raise ValueError("RetryPolicy delays must be >= 0")

    def delay(self, attempt: int) -> float:
        """Seconds to sleep after failed attempt number `attempt` (0-based)."""
        d = min(self.max_delay, self.base_delay * (2**attempt))
        return d * (1 + self.jitter * random.random())


NO_RETRY = RetryPolicy(attempts=1)


def call_with_retries(fn: Callable[[], T], url: str, policy: RetryPolicy, sleep=time.sleep) -> T:
    """Run `fn`; retry TransientError-class failures per `policy`; raise a classified StorageError otherwise."""
    last: Exception | None = None
    for attempt in range(policy.attempts):
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - every backend error is classified below
            err = classify(exc, url)
            if not isinstance(err, TransientError):
                raise err from exc
            last = err
            if attempt + 1 < policy.attempts:
                sleep(policy.delay(attempt))
    assert last is not None
    raise TransientError(last.url, f"{last.reason}; gave up after {policy.attempts} attempts") from last
