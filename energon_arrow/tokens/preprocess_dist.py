"""`preprocess` under torchrun / srun: every rank tokenizes its slice of the inputs, rank 0 writes one output.

`preprocess_distributed(inputs, output_prefix, opts, progress)` runs a plain `preprocess` outside a
multi-process torch.distributed job. Inside one (gloo, joined from the environment or the caller's group):

1. rank 0 lists the inputs and plans the work units (`opts.workers` per rank) and sends the plan to every rank;
2. rank r tokenizes units `k % world == r` with its own `opts.workers` processes, each into a part named after
   its unit number, in a private folder beside the output (`<output folder>/.ea-preprocess-<run>/`, local or
   on the object store: every rank must reach the output's storage - a shared filesystem or a bucket);
3. rank 0 gathers the units' counts and merges every part in unit order into the outputs, exactly as a
   single-process run does (the output is byte-identical to it), published atomically (.bin then .idx);
4. rank 0 removes the parts and broadcasts the summary (or its error: every rank then raises).

Every rank returns the summary.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence

from energon_arrow.adapters import open_storage
from energon_arrow.dist_group import join_group, leave_group
from energon_arrow.tokens.jsonl import expand_inputs, plan_units
from energon_arrow.tokens.preprocess import (
    PreprocessOptions,
    ProgressFn,
    check_options,
    merge_parts,
    preprocess,
    run_units,
    summarize,
)


def parts_folder(output_prefix: str, run: str) -> tuple[str, str]:
    """(storage root, relative folder) of a run's parts: beside the output."""
    parent, _, _ = output_prefix.rstrip("/").rpartition("/")
    return parent or ".", f".ea-preprocess-{run}"


def preprocess_distributed(
    inputs: Sequence[str], output_prefix: str, opts: PreprocessOptions, progress: ProgressFn | None = None
) -> dict:
    rank, world, joined = join_group()
    try:
        if world <= 1:
            return preprocess(inputs, output_prefix, opts, progress)
        return _in_group(inputs, output_prefix, opts, progress or (lambda d, t, b: None), rank, world)
    finally:
        leave_group(joined)


def _in_group(inputs, output_prefix, opts, progress, rank: int, world: int) -> dict:
    import torch.distributed as dist

    t0 = time.perf_counter()
    plan: list = [None]
    error = None
    try:
        tok, dtype = check_options(opts)
        if rank == 0:
            files = expand_inputs(inputs, opts.storage_options)
            plan = [
                (files, plan_units(files, opts.workers * world, opts.min_split_bytes), uuid.uuid4().hex[:12])
            ]
    except Exception as exc:  # noqa: BLE001 - every rank must take part in the broadcast
        error = exc
    dist.broadcast_object_list(plan, src=0)
    if plan[0] is None:
        raise error or RuntimeError("preprocess failed on rank 0 while planning the work units")
    files, units, run = plan[0]
    root, folder = parts_folder(output_prefix, run)
    storage = open_storage(root, opts.storage_options)
    part_dir = storage.url_of(folder) if not storage.is_local else storage.local_path(folder)
    mine = [k for k in range(len(units)) if k % world == rank]
    share: list = []
    try:
        if error is not None:
            raise error
        storage.makedirs(folder)
        results = run_units([units[k] for k in mine], opts, dtype, part_dir, progress, mine, opts.tmp_dir)
        share = list(zip(mine, results))
    except Exception as exc:  # noqa: BLE001 - sent to rank 0, which raises it for every rank
        share = [(-1, f"rank {rank}: {type(exc).__name__}: {exc}")]
        error = exc
    everything: list | None = [None] * world if rank == 0 else None
    dist.gather_object(share, everything, dst=0)
    outcome: list = [None]
    if rank == 0:
        try:
            outcome = [("ok", _merge(everything, output_prefix, opts, dtype, files, units, tok, t0))]
        except Exception as exc:  # noqa: BLE001 - broadcast, then raised on rank 0 below
            outcome, error = [("error", f"{type(exc).__name__}: {exc}")], exc
        finally:
            storage.remove(folder, recursive=True)
    dist.broadcast_object_list(outcome, src=0)
    kind, value = outcome[0]
    if kind == "ok":
        return value
    if error is not None:
        raise error
    raise RuntimeError(f"preprocess failed: {value}")


def _merge(everything, output_prefix, opts, dtype, files, units, tok, t0) -> dict:
    by_unit: dict[int, dict] = {}
    for share in everything:
        for k, result in share:
            if k < 0:
                raise RuntimeError(result)
            by_unit[k] = result
    # units a rank did not run (--max-documents reached before them) come after every unit the merge takes
    results = [by_unit[k] for k in sorted(by_unit)]
    outputs = merge_parts(results, output_prefix, opts, dtype)
    return summarize(files, len(units), opts, tok, dtype, results, outputs, t0)
