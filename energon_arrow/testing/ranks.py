"""Run a function as N torch.distributed ranks (gloo on loopback, forked processes) for tests."""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
import tempfile
from collections.abc import Callable
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_entry(rank: int, port: int, world_size: int, out: str, target: Callable, args: tuple) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    try:
        gathered = [None] * world_size
        dist.all_gather_object(gathered, target(rank, *args))
        if rank == 0:
            with open(out, "w") as f:
                json.dump(gathered, f)
    finally:
        dist.destroy_process_group()


def run_gloo_ranks(target: Callable, *args, world_size: int = 2, timeout: float = 120) -> list[Any]:
    """Call `target(rank, *args)` in `world_size` forked processes joined in a gloo process group; returns the
    JSON-able values they return, by rank. Raises when a rank fails or does not finish within `timeout`."""
    port = free_port()
    ctx = multiprocessing.get_context("fork")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        procs = [
            ctx.Process(target=_rank_entry, args=(rank, port, world_size, out, target, args))
            for rank in range(world_size)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=timeout)
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
        codes = [p.exitcode for p in procs]
        if codes != [0] * world_size:
            raise RuntimeError(f"ranks exited with codes {codes}")
        with open(out) as f:
            return json.load(f)
