"""The loaders `get_loader` / `get_savable_loader` return, with energon 7.4's behaviour on top of `Loader`.

- `len()` is the dataset's (see EnergonDataset.__len__);
- stream mode (grouped batches, generator hooks, packing, `batch_size=None`): batches are formed by
  energon/regroup.py (packing by energon/packing.py), per energon worker (energon/worker_regroup.py);
- `virtual_epoch_length > 0`: each `iter()` yields that many batches, the next continues the stream (energon's
  EpochizeDataset); when a finite pass (repeat=False) ends first, that virtual epoch ends with it; a val `limit`: each pass yields the first `limit` batches;
- watchdog (energon/watchdog.py): when producing a batch takes longer than `watchdog_timeout_seconds` (the first
  `watchdog_initial_timeout_seconds`), the producing process prints its threads' stacks and warns; with
  `fail_on_timeout=True` it exits;
- `worker_config.worker_log_level >= 1`: energon's worker debug log records (energon/debug_log.py);
- `SavableLoader`: `save_state_rank` / `restore_state_rank` (plain dicts) and `save_state_global` /
  `restore_state_global` (gathered / scattered with torch.distributed when the world has several ranks).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Generic, TypeVar

import torch.distributed

from energon_arrow.energon.debug_log import LoaderLog
from energon_arrow.energon.energon_dataset import EnergonDataset
from energon_arrow.energon.restore_sample import can_restore, restore_item, tag_stream_item
from energon_arrow.energon.worker_regroup import WorkerRegroupers
from energon_arrow.energon.worker_send import received
from energon_arrow.loader.errors import LoaderError
from energon_arrow.loader.loader import Loader

T = TypeVar("T")  # the batch type (energon's `SavableDataLoader[T]`)


class BasicLoader(Loader, Generic[T]):
    """energon's BasicDataLoader: iterates an EnergonDataset (see the module docstring)."""

    def __init__(
        self,
        dataset: EnergonDataset,
        *,
        prefetch_factor: int = 2,
        timeout: float = 0,
        watchdog_timeout_seconds: float | None = 60,
        watchdog_initial_timeout_seconds: float | None = None,
        fail_on_timeout: bool = False,
        cache_pool: Any = None,
    ):
        if not isinstance(dataset, EnergonDataset):
            raise LoaderError(
                f"expected a dataset from get_train_dataset / get_val_dataset, got {type(dataset).__name__}"
            )
        wc = dataset.worker_config
        super().__init__(
            dataset,
            num_workers=wc.num_workers,
            prefetch_factor=prefetch_factor,
            device="cpu",
            timeout=timeout,
        )
        self.worker_config = wc
        dataset.hooks.cache_pool = cache_pool  # forked into the workers with the dataset
        self.watchdog = (watchdog_timeout_seconds, watchdog_initial_timeout_seconds, fail_on_timeout)
        self.regroup = (
            WorkerRegroupers(
                dataset.hooks,
                dataset.schedule,
                dataset.batch_size,
                dataset.batch_drop_last,
                dataset.batch_limit,
                getattr(dataset, "packing_buffer_size", None),
            )
            if dataset.hooks.stream
            else None
        )
        self.epoch_offset = 0
        self._regroup_state: dict | None = None
        self._pass_idx = 0  # batches yielded in the current pass (the debug log's idx)
        kind = "SavableDataLoader" if isinstance(self, SavableLoader) else "BasicDataLoader"
        self.debug_log = (
            LoaderLog(wc, kind, _debug_config(dataset), ids=SavableLoader) if wc.should_log(1) else None
        )

    def __len__(self) -> int:
        return len(self.dataset)

    def config(self) -> dict:
        """energon's `loader.config()`: the pipeline energon runs for this call, in energon's names
        (energon/pipeline_config.py), to compare with a config stored by an energon job."""
        from energon_arrow.energon.pipeline_config import loader_config

        return loader_config(
            self, "SavableDataLoader" if isinstance(self, SavableLoader) else "BasicDataLoader"
        )

    # ---- iteration ---------------------------------------------------------------------------------------
    def _stream(self) -> Iterator[Any]:
        rg, ds = self.regroup, self.dataset
        if self._regroup_state is not None:
            rg.restore(self._regroup_state, self._encoded_chunk)
            self._regroup_state = None
        total = ds.total_batches()
        if total is not None and self.next_batch >= total or rg.at_limit:
            if rg.done:
                rg.reset()  # the previous pass is over: start a new one
                self.next_batch = 0
            else:  # the state was saved in the last batches of a pass: finish it
                rg.finish()
                yield from self._drain()
                return
        ds.hooks.fed = rg.fed()  # where each worker's outputs stand (forked into the workers)
        for samples in super()._batches():
            rg.feed(self.next_batch - 1, received(samples))
            yield from self._drain()
            if rg.at_limit:
                self.next_batch = total if total is not None else self.next_batch
                return
        if total is not None:
            rg.finish()
            yield from self._drain()

    def _drain(self) -> Iterator[Any]:
        """The regroupers' outputs ready in turn, each tagged with the queue entry it comes from (restore_sample)."""
        for item, entry in self.regroup.drain():
            yield tag_stream_item(item, entry)

    def _encoded_chunk(self, chunk: int, batch: int) -> list:
        """The encoded samples of `chunk` made again for the batch with index `batch` (restoring a state)."""
        with self.dataset.hooks.restoring_samples(batch):
            return self.dataset.encoded_chunk(chunk)

    def _batches(self) -> Iterator[Any]:
        ds = self.dataset
        length = ds.virtual_epoch_length
        ds.watchdog = self.watchdog  # the workers (forked when iteration starts) watch their batches
        total = ds.total_batches()
        if self.next_batch == 0 or total is not None and self.next_batch >= total:
            self._pass_idx = 0  # a new pass starts
        it = self._stream() if self.regroup is not None else super()._batches()
        if self.debug_log is not None:
            it = self.debug_log.iteration(self._positioned(it))
        try:
            for item in it:
                if length:
                    self.epoch_offset += 1
                    if self.epoch_offset >= length:
                        self.epoch_offset = 0
                        yield item
                        self._pass_open = (
                            False  # a virtual epoch ending with the pass ends it (docs/migration.md)
                        )
                        return
                yield item
            self.epoch_offset = (
                0  # a finite pass ended inside the virtual epoch: the next iter() starts a new one
            )
        finally:
            it.close()

    def _positioned(self, items: Iterator[Any]) -> Iterator[tuple[Any, int, int, int]]:
        """(item, the worker that produced its (last) chunk, that worker's index of the chunk in this pass, the
        item's index in the pass) for the debug log."""
        n = max(self.num_workers, 1)
        for item in items:
            b = max(self.next_batch - 1 - self.dataset.start_batch, 0)
            idx = self._pass_idx
            self._pass_idx += 1
            yield item, b % n, b // n, idx

    # ---- restoring one item ------------------------------------------------------------------------------
    def can_restore_sample(self) -> bool:
        """Whether restore_sample can rebuild items: every task-encoder hook it calls is `@stateless`."""
        return can_restore(self)

    def restore_sample(self, restore_key: tuple) -> Any:
        """The batch (sample when unbatched) this loader yielded with `__restore_key__` `restore_key`, read and
        encoded again (energon/restore_sample.py)."""
        with self.dataset.hooks.restoring_samples():
            return restore_item(self, restore_key)

    # ---- state -------------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        state = super().state_dict()
        state["epoch_offset"] = self.epoch_offset
        schedule = self.dataset.schedule
        if (
            getattr(schedule, "rank_batches", 0) is None
        ):  # endless energon order: where each worker's stream is
            samples, turn = schedule.positions(self.next_batch)
            wc = self.worker_config
            state |= {
                "worker_samples": samples,
                "worker_turn": turn,
                "rank": wc.rank,
                "world_size": wc.world_size,
            }
        saved_streams = getattr(schedule, "saved_streams", None)
        streams = saved_streams(self.next_batch) if saved_streams is not None else None
        if streams and any(s is not None for s in streams):  # where each stream resumes without replaying
            state["worker_streams"] = streams
        if self.regroup is not None:
            state["regroup"] = (
                self._regroup_state if self._regroup_state is not None else self.regroup.state()
            )
        return state

    def _moved_streams(self, state: dict) -> bool:
        """Whether `state` holds the worker streams of another layout (saved for other workers or another batch
        size, or dealt to this rank by `checkpoint redist`): then the streams resume from their positions."""
        if not isinstance(state, dict) or "worker_samples" not in state:
            return False
        schedule, wc = self.dataset.schedule, self.worker_config
        return getattr(schedule, "rank_batches", 0) is None and (
            len(state["worker_samples"]) != schedule.workers
            or state.get("rank") != wc.rank
            or state["settings"].get("global_batch_size") != self.dataset.settings.global_batch_size
        )

    def _resume_streams(self, state: dict) -> None:
        ours = self.dataset.settings.fingerprint()
        saved = state["settings"]
        moved = {"global_batch_size", "slice_workers"}
        diff = {
            k: (saved.get(k), ours.get(k))
            for k in set(saved) | set(ours)
            if k not in moved and saved.get(k) != ours.get(k)
        }
        if diff:
            raise LoaderError(f"loader state was saved with different settings (saved, now): {diff}")
        if state["sources"] != [len(s) for s in self.dataset.sources]:
            raise LoaderError(
                f"loader state was saved for datasets of {state['sources']} samples, these have "
                f"{[len(s) for s in self.dataset.sources]}"
            )
        if self.regroup is not None:
            raise LoaderError(
                "a loader that regroups samples (grouping, packing, generator hooks, unbatched) resumes only with "
                "the same workers and batch size (its state holds each worker's pending samples)"
            )
        self.dataset.schedule.resume(state["worker_samples"], state.get("worker_turn", 0))
        self._restore_streams(state)
        self.next_batch = 0
        self.epoch_offset = int(state.get("epoch_offset", 0))

    def _restore_streams(self, state: dict) -> None:
        """The stream snapshots of a saved state, for the streams they were taken from (a stream without one is
        computed again from its start)."""
        saved = state.get("worker_streams")
        restore = getattr(self.dataset.schedule, "restore_streams", None)
        if isinstance(saved, list) and restore is not None:
            restore(saved)

    def load_state_dict(self, state: dict) -> None:
        if self._moved_streams(state):
            self._resume_streams(state)
            return
        saved_batch_size = (
            (state.get("settings") or {}).get("global_batch_size") if isinstance(state, dict) else None
        )
        if self.regroup is not None and saved_batch_size not in (
            None,
            self.dataset.settings.global_batch_size,
        ):
            raise LoaderError(
                f"loader state was saved with global batch size {saved_batch_size}, this loader has "
                f"{self.dataset.settings.global_batch_size}: a loader that regroups samples (grouping, packing, "
                "generator hooks, unbatched) resumes only with the same one (its state holds each rank's pending samples)"
            )
        super().load_state_dict(state)
        self._restore_streams(state)
        self.epoch_offset = self.rescaled(int(state.get("epoch_offset", 0)), saved_batch_size)
        if self.regroup is not None:
            if "regroup" not in state:
                raise LoaderError("loader state has no regrouping state, but this loader regroups batches")
            self._regroup_state = state["regroup"]


class SavableLoader(BasicLoader[T]):
    """energon's SavableDataLoader: a BasicLoader whose position can be saved and restored."""

    #: numbers the loaders and their iterations in the worker debug log (energon's counter of the same name)
    _next_id = 0

    def save_state_rank(self) -> dict:
        """This rank's state (a plain, JSON-able dict)."""
        return self.state_dict()

    def restore_state_rank(self, state: dict | None) -> None:
        """Continue from a `save_state_rank()` state (None: start from the beginning)."""
        if state is not None:
            self.load_state_dict(state)

    def save_state_global(self, global_dst_rank: int) -> list | None:
        """The states of all ranks, gathered on `global_dst_rank` (None on the other ranks)."""
        state = self.save_state_rank()
        wc = self.worker_config
        if wc.world_size <= 1:
            return [state]
        self._require_distributed("save_state_global")
        output = [None] * wc.world_size if wc.global_rank() == global_dst_rank else None
        if output is None and wc.data_parallel_group is not None:
            try:
                torch.distributed.get_group_rank(wc.data_parallel_group, global_dst_rank)
            except RuntimeError:
                raise ValueError(
                    f"global_dst_rank {global_dst_rank} is not in this rank's data parallel group"
                ) from None
        torch.distributed.gather_object(state, output, global_dst_rank, group=wc.data_parallel_group)
        return output

    def restore_state_global(self, state: list | None, *, src_rank: int | None = None) -> None:
        """Restore from `save_state_global`: every rank passes the whole list, or (with `src_rank`, the rank
        within the data parallel group) only `src_rank` does and the states are scattered."""
        wc = self.worker_config
        if src_rank is None or wc.world_size == 1:
            if not isinstance(state, list) or len(state) != wc.world_size:
                raise LoaderError(
                    f"restore_state_global: expected a list of {wc.world_size} rank states, got {state!r:.200}"
                )
            self.restore_state_rank(state[wc.rank])
            return
        self._require_distributed("restore_state_global")
        if wc.data_parallel_group is not None:
            try:
                global_src = torch.distributed.get_global_rank(wc.data_parallel_group, src_rank)
            except RuntimeError:
                raise ValueError(f"src_rank {src_rank} is not in this rank's data parallel group") from None
        else:
            global_src = src_rank
        if wc.rank != src_rank:
            state = [None] * wc.world_size
        elif not isinstance(state, list) or len(state) != wc.world_size:
            raise LoaderError(f"restore_state_global: expected a list of {wc.world_size} rank states")
        mine = [None]
        torch.distributed.scatter_object_list(mine, state, src=global_src, group=wc.data_parallel_group)
        self.restore_state_rank(mine[0])

    @staticmethod
    def _require_distributed(what: str) -> None:
        if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
            raise LoaderError(f"{what}: world_size > 1 needs an initialised torch.distributed process group")


def _debug_config(dataset: EnergonDataset) -> dict:
    """What the debug log's loader record says about the dataset (cli/analyze_debug.py reads mode and datasets)."""
    return {
        "type": type(dataset).__name__,
        "mode": dataset.mode,
        "datasets": [s.name for s in dataset.sources],
        "batch_size": dataset.batch_size,
        "settings": dataset.settings.fingerprint(),
        "worker_config": dataset.worker_config.config(),
    }
