"""Run a function as N torch.distributed ranks (gloo on loopback, forked processes) for tests."""

from __future__ import annotations

import multiprocessing
import socket
from collections.abc import Callable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_gloo_ranks(target: Callable, *args, world_size: int = 2, timeout: float = 120) -> list[int | None]:
    """Call `target(rank, port, *args)` in `world_size` forked processes (each should init a gloo process
    group on `tcp://127.0.0.1:{port}`); returns their exit codes (None for one killed after `timeout`)."""
    port = free_port()
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=target, args=(rank, port, *args)) for rank in range(world_size)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=timeout)
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    return [p.exitcode for p in procs]
