"""Prepare under `torchrun`: every rank indexes its share of the shards, rank 0 writes the index.

`prepare_distributed(storage, options, progress)` runs a plain `prepare_dataset` when the process is not part of
a multi-process torch.distributed job (no `WORLD_SIZE` > 1 in the environment and no initialised group). Otherwise
it joins (or reuses) the process group (gloo, `env://`), plans the same shard list on every rank, indexes shards
`i % world_size == rank` locally (each rank writes those shards' `.tar.idx`), gathers the results on rank 0, and
rank 0 writes `.nv-meta`. The outcome is broadcast so every rank raises if rank 0 failed. Ranks other than 0
return None.
"""

from __future__ import annotations

import os
import sys

from energon_arrow.index.prepare import PrepareOptions, PrepareResult, plan_prepare, prepare_dataset
from energon_arrow.index.workers import default_workers, index_shards


def _world() -> tuple[int, int, bool]:
    """(rank, world_size, joined_here) of the torch.distributed job this process belongs to; (0, 1, False) when
    none. `joined_here`: this call initialised the process group (so prepare must also destroy it)."""
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


def _local_share(storage, to_index, rank: int, world: int, workers: int) -> list[tuple[int, object]]:
    mine = [(i, item) for i, item in enumerate(to_index) if i % world == rank]
    out = []
    try:
        for j, res in index_shards(storage, [item for _, item in mine], workers):
            out.append((mine[j][0], res))
    except Exception as exc:  # noqa: BLE001 - shipped to rank 0, which raises it for everyone
        return [(-1, exc)]
    return out


def prepare_distributed(storage, options: PrepareOptions, progress=None) -> PrepareResult | None:
    rank, world, joined = _world()
    try:
        return _prepare_in_group(storage, options, progress, rank, world)
    finally:
        if joined:
            # a group left to interpreter shutdown can abort the process ("terminate called without an active
            # exception") after a successful prepare: every rank leaves it here, together
            import torch.distributed as dist

            dist.destroy_process_group()


def _prepare_in_group(
    storage, options: PrepareOptions, progress, rank: int, world: int
) -> PrepareResult | None:
    if world <= 1 or options.tar_index_only:
        if world > 1 and rank != 0:
            return None
        return prepare_dataset(storage, options, progress=progress)
    import torch.distributed as dist

    workers = options.num_workers or default_workers()
    error = None
    try:
        plan = plan_prepare(storage, options)
        share = _local_share(storage, plan.to_index, rank, world, workers)
    except Exception as exc:  # noqa: BLE001 - every rank must still take part in the gather
        share, error = [(-1, exc)], exc
    everything: list | None = [None] * world if rank == 0 else None
    dist.gather_object(share, everything, dst=0)
    if rank != 0:
        outcome = [None]
        dist.broadcast_object_list(outcome, src=0)
        if error is not None:
            raise error
        if outcome[0] is not None:
            raise RuntimeError(f"prepare failed on rank 0: {outcome[0]}")
        return None
    try:
        results: dict[int, object] = {}
        for part in everything:
            for i, res in part:
                if i < 0:
                    raise res
                results[i] = res

        def gathered(_storage, to_index, _workers):
            return ((i, results[i]) for i in range(len(to_index)))

        result = prepare_dataset(storage, options, progress=progress, indexer=gathered)
    except BaseException as exc:
        dist.broadcast_object_list([f"{type(exc).__name__}: {exc}"], src=0)
        raise
    dist.broadcast_object_list([None], src=0)
    return result
