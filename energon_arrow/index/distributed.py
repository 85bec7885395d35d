"""Prepare under `torchrun`: every rank indexes its share of the shards, rank 0 writes the index.

`prepare_distributed(storage, options, progress)` runs a plain `prepare_dataset` when the process is not part of
a multi-process torch.distributed job (no `WORLD_SIZE` > 1 in the environment and no initialised group). Otherwise
it joins (or reuses) the process group (gloo, `env://`), plans the same shard list on every rank, indexes shards
`i % world_size == rank` locally (each rank writes those shards' `.tar.idx`), gathers the results on rank 0, and
rank 0 writes `.nv-meta`. The outcome is broadcast so every rank raises if rank 0 failed. Ranks other than 0
return None. Rank 0 plans alone and broadcasts the shard list (shards kept in `.nv-meta/.prepare-work` by a
killed run are not indexed again: the job resumes like a single-process prepare).
"""

from __future__ import annotations

from energon_arrow.dist_group import join_group, leave_group
from energon_arrow.index.prepare import PrepareOptions, PrepareResult, plan_prepare, prepare_dataset
from energon_arrow.index.workers import default_workers, index_shards


def _local_share(
    storage, to_index, work_entries, rank: int, world: int, workers: int
) -> list[tuple[int, object]]:
    """This rank's shards (`i % world == rank`), indexed here; each worker keeps its shard's rows in the work
    folder, so that a rerun of a killed job resumes from them."""
    mine = [(i, item) for i, item in enumerate(to_index) if i % world == rank]
    entries = [work_entries[i] for i, _ in mine]
    out = []
    try:
        for j, res in index_shards(storage, [item for _, item in mine], workers, work_entries=entries):
            out.append((mine[j][0], res))
    except Exception as exc:  # noqa: BLE001 - shipped to rank 0, which raises it for everyone
        return [(-1, exc)]
    return out


def prepare_distributed(storage, options: PrepareOptions, progress=None) -> PrepareResult | None:
    rank, world, joined = join_group()
    try:
        return _prepare_in_group(storage, options, progress, rank, world)
    finally:
        leave_group(joined)


def _prepare_in_group(
    storage, options: PrepareOptions, progress, rank: int, world: int
) -> PrepareResult | None:
    if world <= 1 or options.tar_index_only:
        if world > 1 and rank != 0:
            return None
        return prepare_dataset(storage, options, progress=progress)
    import torch.distributed as dist

    workers = options.num_workers or default_workers()
    error = plan = None
    # rank 0 plans and sends the shard list: ranks planning on their own could see each other's work entries
    if rank == 0:
        try:
            plan = plan_prepare(storage, options)
            shared = [(plan.to_index, plan.work_entries)]
        except Exception as exc:  # noqa: BLE001 - raised below, after every rank took part
            error, shared = exc, [None]
    else:
        shared = [None]
    dist.broadcast_object_list(shared, src=0)
    try:
        if shared[0] is None:
            raise error or RuntimeError("prepare failed on rank 0 while planning")
        to_index, entries = shared[0]
        share = _local_share(storage, to_index, entries, rank, world, workers)
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

        result = prepare_dataset(storage, options, progress=progress, indexer=gathered, plan=plan)
    except BaseException as exc:
        dist.broadcast_object_list([f"{type(exc).__name__}: {exc}"], src=0)
        raise
    dist.broadcast_object_list([None], src=0)
    return result
