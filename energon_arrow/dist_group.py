"""The torch.distributed job this process belongs to, for the commands that run under torchrun / srun
(`prepare`, `preprocess`): join it from the environment (gloo, `env://`), or use the group the caller made.

`join_group() -> (rank, world_size, joined_here)`: (0, 1, False) outside a job (no `WORLD_SIZE` > 1 and no
initialised group); `joined_here` says this call initialised the group, so the command must also destroy it
(`leave_group`) - a group left to interpreter shutdown can abort the process after a successful run.
"""

from __future__ import annotations

import os
import sys


def join_group() -> tuple[int, int, bool]:
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        dist = sys.modules.get("torch.distributed")  # a group can only exist if the caller imported torch
        if dist is not None and dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size(), False
        return 0, 1, False
    import torch.distributed as dist

    joined = not dist.is_initialized()
    if joined:
        dist.init_process_group("gloo", init_method="env://")
    return dist.get_rank(), dist.get_world_size(), joined


def leave_group(joined: bool) -> None:
    """Destroy the group if `join_group` made it (every rank leaves together)."""
    if joined:
        import torch.distributed as dist

        dist.destroy_process_group()
