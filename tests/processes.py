"""Test helpers: run child processes that each put one result on a queue, and collect them; call a function
that might hang (a loader whose workers wait forever) so that the test fails instead of blocking the run."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


def run_collecting(procs, queue, timeout: float = 60) -> list:
    """Start `procs`, take one result per process from `queue` (in arrival order), join them and assert each
    exited with status 0; returns the results."""
    for p in procs:
        p.start()
    results = [queue.get(timeout=timeout) for _ in procs]
    for p in procs:
        p.join(timeout)
        assert p.exitcode == 0, f"{p.name} exited with {p.exitcode}"
    return results


def call_within(fn: Callable[[], Any], timeout: float, what: str) -> Any:
    """`fn()`, run in a daemon thread; the test fails with `what` when it has not returned after `timeout` s."""
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"{what}: not done within {timeout} s (it hangs)"
    if "error" in out:
        raise out["error"]
    return out["value"]
