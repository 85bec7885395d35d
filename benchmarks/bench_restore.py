"""Restoring a training loader deep into a training run (energon's order, bench_loader's dataset and settings:
64 shards x 1,000 samples, batch 32, 2 workers, shuffle buffer 100): the time from `restore_state_rank` to the
first batch, from a state whose workers are `DEPTH` samples into their streams (--quick: a tenth of it).

- ours: the state as the loader saves it, with a snapshot of each worker's stream (energon/train_stream.py), so a
  restore computes at most 131,072 samples of each stream again;
- reference: the same state without the snapshots, restored as every state was before them: each worker computes
  its stream from the start (~0.8 us per sample).

Not a comparison with energon 7.4.1: energon restores its workers' saved states at once too, but bringing energon
this deep into a training takes hours at its ~10k samples/s. The state is built without iterating the loader: each
worker's stream is computed to the position in this process (untimed), which takes the snapshots a training run
would have taken on the way.
"""

from __future__ import annotations

import os
import time

from benchmarks.bench_loader import BATCH, _dataset, _train_dataset
from benchmarks.harness import Comparison, alternate

DEPTH = 5_000_000  # samples each worker has read


def _state(root: str, depth: int) -> dict:
    import energon_arrow as ea

    loader = ea.get_savable_loader(_train_dataset(ea, root, repeat=True))
    schedule = loader.dataset.schedule
    loader.next_batch = depth // BATCH * schedule.workers  # the batches delivered: depth samples per worker
    for stream in schedule.streams:
        stream.items(depth, depth + 1)  # what the workers computed in training, snapshots included
    state = loader.save_state_rank()
    assert state["worker_samples"] == [depth // BATCH * BATCH] * schedule.workers, state["worker_samples"]
    return state


def _first_batch(root: str, state: dict) -> float:
    import energon_arrow as ea

    t = time.perf_counter()
    loader = ea.get_savable_loader(_train_dataset(ea, root, repeat=True))
    loader.restore_state_rank(state)
    it = iter(loader)
    next(it)
    elapsed = time.perf_counter() - t
    it.close()
    return elapsed


def run(args) -> list[Comparison]:
    base = os.environ.get("EA_BENCH_DIR", "/tmp/ea-bench-loader")
    root = _dataset(f"{base}/ds-64x1000", 64, 1000)
    depth = DEPTH // 10 if args.quick else DEPTH
    saved = _state(root, depth)
    plain = {k: v for k, v in saved.items() if k != "worker_streams"}
    ours, ref = alternate(lambda: _first_batch(root, saved), lambda: _first_batch(root, plain), args.repeats)
    return [
        Comparison(
            f"restore to the first batch, workers {depth:,} samples into their streams",
            "s",
            ours,
            ref,
            notes={"snapshots_at": [s["at"] for s in saved["worker_streams"]]},
        )
    ]
