"""energon's worker debug log (`WorkerConfig(worker_debug_path=..., worker_log_level=...)`): JSON lines written
through `WorkerConfig.worker_log`, one file per process (`{worker_id}`: 0 for the main process of rank 0, 1.. for its
DataLoader workers, rank r's from r * (num_workers + 1)), with energon's record types and fields:

- main process, level >= 1, per loader: `SavableLoader.__init__` / `BasicDataLoader.__init__` (its id and config),
  per `iter()`: `SavableDataLoader.iter` / `BasicDataLoader.iter`, per batch `...yield` (id, iter_id, worker_id,
  worker_idx, idx, iter_idx, global_idx, keys) and `...StopIteration` when the iteration ends;
- each worker, level >= 1 for train (>= 2 for val): `yield_batch` (rank, global worker id, mode, the worker's step,
  keys) per batch it produces (in stream mode: per chunk of encoded samples), as energon's LogSampleDataset.

`energon-arrow analyze-debug` reads them (cli/analyze_debug.py). Nothing here runs when logging is off: the
callers check `should_log` once per iteration.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from energon_arrow.energon.worker_config import WorkerConfig


def batch_keys(item: Any) -> list[str] | None:
    """The sample keys of a batch (energon's default_get_batch_keys), or of a list of encoded samples."""
    from energon_arrow.energon.wrappers.map import default_get_batch_keys

    if isinstance(item, list):
        keys = [k for sample in item for k in (default_get_batch_keys(sample) or ())]
        return keys or None
    return default_get_batch_keys(item)


class LoaderLog:
    """The main-process records of one loader (`kind`: "SavableDataLoader" or "BasicDataLoader"). `ids`: the class
    whose `_next_id` numbers loaders and their iterations (energon's `SavableDataLoader._next_id`, one counter per
    process that tests reset)."""

    def __init__(self, worker_config: WorkerConfig, kind: str, config: dict, ids: type):
        self.wc = worker_config
        self.kind = kind
        self.ids = ids
        self.id = self.next_id()
        self.global_idx = 0
        init = "SavableLoader.__init__" if kind == "SavableDataLoader" else "BasicDataLoader.__init__"
        self._write(init, id=self.id, config=config)

    def next_id(self) -> int:
        self.ids._next_id += 1
        return self.ids._next_id - 1

    def _write(self, t: str, **fields) -> None:
        self.wc.worker_log({"t": t, "r": self.wc.rank, "w": None, **fields})

    def iteration(self, items: Iterator[tuple[Any, int, int, int]]) -> Iterator[Any]:
        """Log and pass on `items`: (batch, producing worker, that worker's batch index, index in the pass)."""
        iter_id = self.next_id()
        self._write(f"{self.kind}.iter", id=self.id, iter_id=iter_id)
        try:
            for iter_idx, (item, worker_id, worker_idx, idx) in enumerate(items):
                keys = batch_keys(item)
                self._write(
                    f"{self.kind}.yield",
                    id=self.id,
                    iter_id=iter_id,
                    worker_id=worker_id,
                    worker_idx=worker_idx,
                    idx=idx,
                    iter_idx=iter_idx,
                    global_idx=self.global_idx,
                    **({} if keys is None else {"keys": keys}),
                )
                self.global_idx += 1
                yield item
        finally:
            self._write(f"{self.kind}.StopIteration", id=self.id, iter_id=iter_id)


def worker_batches_logged(items: Iterator[tuple], worker_config: WorkerConfig, mode: str) -> Iterator[tuple]:
    """The worker's (b, skipped, batch, leases, snapshots) items, each logged as energon's LogSampleDataset `yield_batch`."""
    from energon_arrow.energon.wrappers.base import global_worker_id

    for step, item in enumerate(items):
        keys = batch_keys(item[2])
        record = {
            "t": "yield_batch",
            "r": worker_config.rank,
            "w": global_worker_id(worker_config),
            "m": mode,
        }
        worker_config.worker_log({**record, "idx": step, **({} if keys is None else {"keys": keys})})
        yield item
