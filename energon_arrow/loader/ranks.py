"""This process's rank and world size (light: torch is imported only when asked)."""

from __future__ import annotations


def distributed_rank_world(rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    """Rank and world size: each the given value, else the initialised torch.distributed process group's, else
    0 and 1."""
    if rank is not None and world_size is not None:
        return rank, world_size
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        rank = dist.get_rank() if rank is None else rank
        world_size = dist.get_world_size() if world_size is None else world_size
    return (0 if rank is None else rank), (1 if world_size is None else world_size)
