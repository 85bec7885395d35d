"""Loaders over a wrapper pipeline (what `get_loader` / `get_savable_loader` return for a `SavableDataset`).

A torch DataLoader (batch_size=None, persistent fork workers) iterates one copy of the pipeline per worker. Each
worker sends every item together with its pipeline state right after it (`save_state()`), so the main process
always holds, per worker, the exact state after the last item it handed to the caller: `save_state_rank()` is
exact whatever the prefetching, and `restore_state_rank()` resumes every worker there. The DataLoader serves
workers round-robin; in a restored run, the workers whose turn in the interrupted round was already taken
first fill that turn with a placeholder the loader drops, so the round continues with the worker that was
next. With 0 workers the pipeline runs in the main process, the same way.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Iterator
from typing import Any

import torch

from energon_arrow.energon.cache_pool import check_pool
from energon_arrow.energon.worker_config import WorkerConfig
from energon_arrow.energon.wrappers.base import (
    SavableDataset,
    add_sample_restore_key,
    as_worker,
    num_worker_slots,
    rank_worker_id,
)
from energon_arrow.energon.wrappers.batch import BatchDataset
from energon_arrow.loader.errors import LoaderError


class _EpochEnd:
    """Marks the end of a worker's epoch in the item stream (never handed to the caller)."""


class _Skip:
    """Fills a worker's turn that was already taken before the state was saved (never handed to the caller)."""


_END, _SKIP = _EpochEnd(), _Skip()
WORKER_KEY = "PipelineWorker"
STATE_VERSION = 1


class _WorkerStream(torch.utils.data.IterableDataset):
    """Runs in each worker: restores its state once, then yields (worker, state after item, epoch done, item).
    Items' restore keys are prefixed with `("PipelineWorker", worker)`: `restore_sample` re-makes them as
    that worker (its seeds), like energon's `("SavableDatasetWrapper", worker, ...)` prefix.

    The worker looks one item ahead, so the last item of its epoch carries the state *after* the epoch ended
    and done=True: a run saved there resumes with this worker's epoch finished (it yields nothing until the
    next epoch) instead of mistaking the end-of-epoch state for the start of a new one."""

    def __init__(
        self,
        dataset: SavableDataset,
        restore: list | None,
        done: list,
        next_worker: int,
        gc_every: int,
        cache_pool: Any = None,
    ):
        self.dataset = dataset
        self.restore, self.done = restore, done
        self.next_worker = next_worker
        self.gc_every = gc_every
        self.cache_pool = cache_pool
        self._started = False

    def _start(self, k: int) -> bool:
        """Restore this worker's state (first epoch only); True when its restored epoch had already ended."""
        if self._started:
            return False
        self._started = True
        if self.restore is None:
            return False
        state = self.restore[k]
        if state is None:
            self.dataset.reset_state_deep()
        else:
            self.dataset.restore_state(state)
        return bool(self.done[k])

    def __iter__(self) -> Iterator[tuple[int, Any, bool, Any]]:
        WorkerConfig._cache_pool = self.cache_pool  # this process's pool (cookers with need_cache)
        self.in_worker = torch.utils.data.get_worker_info() is not None
        k = rank_worker_id(self.dataset.worker_config)
        first = not self._started
        epoch_done = self._start(k)
        if first and k < self.next_worker:  # this worker's turn in the interrupted round was taken
            yield k, None, False, _SKIP
        if epoch_done:
            yield k, self.dataset.save_state(), True, _END
            return
        it = iter(self.dataset)
        item = next(it, _END)
        n = 0
        while not isinstance(item, _EpochEnd):
            state = self.dataset.save_state()
            following = next(it, _END)
            if isinstance(following, _EpochEnd):
                state = self.dataset.save_state()  # after the epoch ended
            yield k, state, isinstance(following, _EpochEnd), add_sample_restore_key(item, k, src=_KEY_SRC)
            item = following
            n += 1
            if self.in_worker and self.gc_every > 0 and n % self.gc_every == 0:
                gc.collect()
        yield k, self.dataset.save_state(), True, _END


class _KeySrc:
    """The `src` whose class name prefixes items' restore keys."""


_KeySrc.__name__ = WORKER_KEY
_KEY_SRC = _KeySrc()


def is_pipeline(dataset: Any) -> bool:
    """Whether `dataset` is an energon-style wrapper pipeline (served by the loaders here)."""
    return isinstance(dataset, SavableDataset)


def _as_is(item):
    return item


def _init_worker(freeze: bool, _worker_id: int) -> None:
    """A forked worker inherits the parent's heap, with other loaders' live DataLoader iterators: collecting
    those in the worker would try to stop the parent's workers. Frozen (`gc_freeze_at_start`), the inherited
    heap is never collected (nor touched, so not copied, by the collector); unfrozen, the iterators are marked
    shut down."""
    if freeze:
        gc.freeze()
        return
    cls = torch.utils.data.dataloader._MultiProcessingDataLoaderIter
    for obj in gc.get_objects():
        if type(obj) is cls:
            obj._shutdown = True


class _Progress:
    """Per worker: the state after the last item handed out and whether its epoch ended; the worker whose turn
    is next; whether the epoch in progress ended. Shared by a loader and its epoch iterator, which holds only
    this (not the loader): no reference cycle, so a dropped loader shuts its workers down at once instead of
    leaving its DataLoader to the cycle collector (which closes the queues before the workers are told to stop)."""

    def __init__(self, slots: int):
        self.states: list = [None] * slots
        self.done: list = [False] * slots
        self.next = 0
        self.epoch_over = True


def _epoch_items(progress: _Progress, data_loader) -> Iterator[Any]:
    """One epoch of a pipeline loader, recording each worker's state as its items are handed out."""
    slots = len(progress.states)
    for k, state, done, item in data_loader:
        if isinstance(item, _Skip):
            continue
        progress.states[k], progress.done[k] = state, done
        progress.next = (k + 1) % slots
        if not isinstance(item, _EpochEnd):
            yield item
    progress.next = 0
    progress.done = [False] * slots
    progress.epoch_over = True


class PipelineLoader:
    """energon's basic loader over a wrapper pipeline (iterate it; `len()` is the rank's length)."""

    def __init__(
        self,
        dataset: SavableDataset,
        *,
        worker_config=None,
        prefetch_factor: int = 2,
        gc_collect_every_n_steps: int = 10,
        gc_freeze_at_start: bool = True,
        watchdog_timeout_seconds: float | None = 60,
        watchdog_initial_timeout_seconds: float | None = None,
        fail_on_timeout: bool = False,
        cache_pool: Any = None,
        timeout: float = 0,
    ):
        if not isinstance(dataset, SavableDataset):
            raise LoaderError(f"expected a SavableDataset pipeline, got {type(dataset).__name__}")
        check_pool(cache_pool, type(self).__name__)
        if worker_config is not None and worker_config != dataset.worker_config:
            raise LoaderError("worker_config differs from the dataset's worker_config")
        self.dataset = dataset
        self.cache_pool = cache_pool
        self.worker_config = dataset.worker_config
        self.num_workers = int(self.worker_config.num_workers)
        self.prefetch_factor = prefetch_factor
        self.gc_every, self.gc_freeze = gc_collect_every_n_steps, gc_freeze_at_start
        # energon's watchdog only prints stack traces unless fail_on_timeout; failing maps onto the DataLoader's
        # timeout (seconds a worker may take for one item)
        self.timeout = timeout or (
            watchdog_timeout_seconds if fail_on_timeout and watchdog_timeout_seconds else 0
        )
        self._progress = _Progress(num_worker_slots(self.worker_config))
        self._restore: list | None = None
        self._loader = None
        self._epoch_iter: Iterator | None = None

    def __len__(self) -> int:
        return self.dataset.len_rank()

    def _data_loader(self) -> torch.utils.data.DataLoader:
        if self._loader is None:
            stream = _WorkerStream(
                self.dataset,
                self._restore,
                list(self._progress.done),
                self._progress.next,
                self.gc_every,
                self.cache_pool,
            )
            kwargs: dict[str, Any] = {}
            if self.num_workers > 0:
                kwargs = dict(
                    num_workers=self.num_workers,
                    prefetch_factor=self.prefetch_factor,
                    persistent_workers=True,
                    timeout=self.timeout,
                    multiprocessing_context="fork",
                    worker_init_fn=functools.partial(_init_worker, self.gc_freeze),
                )
            self._loader = torch.utils.data.DataLoader(stream, batch_size=None, collate_fn=_as_is, **kwargs)
        return self._loader

    def __iter__(self) -> Iterator[Any]:
        if self._progress.epoch_over:  # an unfinished epoch continues (energon's persistent iterator)
            self._progress.epoch_over = False
            self._epoch_iter = _epoch_items(self._progress, self._data_loader())
        return self._epoch_iter

    def can_restore_sample(self) -> bool:
        return self.dataset.can_restore_sample()

    def restore_sample(self, restore_key: tuple) -> Any:
        """The item this loader yielded with `__restore_key__` `restore_key`, made again by the pipeline (in
        this process, as the worker that made it)."""
        key = tuple(restore_key) if isinstance(restore_key, (tuple, list)) else ()
        slots = num_worker_slots(self.worker_config)
        if len(key) < 2 or key[0] != WORKER_KEY:
            raise LoaderError(
                f"restore_sample: {restore_key!r:.300} is not a restore key of this loader (expected the "
                f"__restore_key__ of an item it yielded, starting with {WORKER_KEY!r})"
            )
        if not isinstance(key[1], int) or not 0 <= key[1] < slots:
            raise LoaderError(
                f"restore_sample: worker {key[1]!r} of {restore_key!r:.300} is not one of {slots}"
            )
        self.dataset.assert_can_restore()
        outer, WorkerConfig._cache_pool = WorkerConfig._cache_pool, self.cache_pool
        try:
            with as_worker(key[1]):
                item = self.dataset.restore_sample(key[2:])
        finally:
            WorkerConfig._cache_pool = outer
        return add_sample_restore_key(item, key[1], src=_KEY_SRC)

    def config(self) -> dict:
        return {
            "type": type(self).__qualname__,
            "num_workers": self.num_workers,
            "prefetch_factor": self.prefetch_factor,
            "dataset": self.dataset.config(),
        }


class SavablePipelineLoader(PipelineLoader):
    """energon's SavableDataLoader over a wrapper pipeline: `save_state_rank()` / `restore_state_rank()`.

    `checkpoint_every_sec`, `checkpoint_every_min_n_samples` and `n_checkpoints` tune how often energon's workers
    checkpoint (and how many samples a restore replays); here every item carries its exact state, so there is
    nothing to tune: they are accepted for energon's signature and change nothing."""

    def __init__(
        self,
        dataset: SavableDataset,
        *,
        checkpoint_every_sec: float = 60,
        checkpoint_every_min_n_samples: int | None = None,
        n_checkpoints: int | None = None,
        **kwargs,
    ):
        super().__init__(dataset, **kwargs)

    def _micro_batch_size(self) -> int | None:
        ds = self.dataset
        if isinstance(ds, BatchDataset):
            return ds.batch_size
        found = ds._find_wrapped_dataset(BatchDataset) if hasattr(ds, "_find_wrapped_dataset") else None
        return found.batch_size if found is not None else None

    def save_state_rank(self) -> dict:
        return {
            "version": STATE_VERSION,
            "worker_states": list(self._progress.states),
            "next_worker_id": self._progress.next,
            "worker_epoch_done": list(self._progress.done),
            "micro_batch_size": self._micro_batch_size(),
        }

    def restore_state_rank(self, state: dict | None) -> None:
        if self._loader is not None:
            raise LoaderError("restore_state_rank must be called before the loader is iterated")
        if state is None:
            return
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise LoaderError(f"not a pipeline loader state of version {STATE_VERSION}: {state!r:.200}")
        slots = num_worker_slots(self.worker_config)
        if len(state["worker_states"]) != slots:
            raise LoaderError(
                f"the state was saved with {len(state['worker_states'])} worker(s) per rank, this loader has "
                f"{slots}; a pipeline's per-worker state resumes only with the same worker count"
            )
        if state.get("micro_batch_size") != self._micro_batch_size():
            raise LoaderError(
                f"the state was saved with micro batch size {state.get('micro_batch_size')}, this pipeline has "
                f"{self._micro_batch_size()}"
            )
        self._restore = list(state["worker_states"])
        self._progress.states = list(self._restore)
        done = [bool(d) for d in state["worker_epoch_done"]]
        # saved right after the last item of an epoch: the resumed run starts the next epoch
        self._progress.done = [False] * slots if all(done) else done
        self._progress.next = int(state["next_worker_id"])

    # ---- all ranks (torch.distributed) ---------------------------------------------------------------------
    def save_state_global(self, global_dst_rank: int) -> list | None:
        """Every rank's `save_state_rank()`, gathered on `global_dst_rank` (None on the other ranks)."""
        state = self.save_state_rank()
        if self.worker_config.world_size == 1:
            return [state]
        import torch.distributed as dist

        group = getattr(self.worker_config, "data_parallel_group", None)
        out = [None] * self.worker_config.world_size if dist.get_rank() == global_dst_rank else None
        dist.gather_object(state, out, global_dst_rank, group=group)
        return out

    def restore_state_global(self, state: list | None, *, src_rank: int | None = None) -> None:
        """Restore from `save_state_global`: every rank passes the list, or only `src_rank` (within the data
        parallel group) does and the others pass None."""
        world, rank = self.worker_config.world_size, self.worker_config.rank
        if src_rank is None or world == 1:
            if not isinstance(state, list) or len(state) != world:
                raise LoaderError(f"restore_state_global expects a list of {world} rank states")
            return self.restore_state_rank(state[rank])
        import torch.distributed as dist

        group = getattr(self.worker_config, "data_parallel_group", None)
        src = dist.get_global_rank(group, src_rank) if group is not None else src_rank
        if rank == src_rank and (not isinstance(state, list) or len(state) != world):
            raise LoaderError(
                f"restore_state_global: rank {src_rank} must pass a list of {world} rank states"
            )
        local = [None]
        dist.scatter_object_list(local, state if rank == src_rank else [None] * world, src=src, group=group)
        self.restore_state_rank(local[0])
