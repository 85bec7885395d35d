"""Test helper: run child processes that each put one result on a queue, and collect them."""

from __future__ import annotations


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
