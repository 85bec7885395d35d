"""`WorkerConfig`: energon's description of this process's data-parallel rank and its DataLoader workers.

Same fields, defaults and methods as energon 7.4's WorkerConfig (rank, world_size, num_workers,
data_parallel_group, seed_offset, worker_debug_path, worker_log_level, global_error_handler,
restore_error_handler; default_worker_config, rank_worker_id, global_rank, global_worker_id, worker_seed,
config, should_log, worker_log, the `active_worker_config` of the iterating worker and its sample index stack).

One addition: energon-arrow's loader numbers batches and samples by their position in the rank's stream, which
does not depend on the worker count (that is what makes resume elastic); while it calls a task-encoder hook it
sets `WorkerConfig.index_override = (batch_index, sample_index)` and `active_worker_batch_index` /
`active_worker_sample_index` (and so `TaskEncoder.current_batch_index` / `current_sample_index`) return those.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TextIO

import torch.distributed
import torch.utils.data

from energon_arrow.samples.errors import log_exception, reraise_exception


@dataclass(slots=True, kw_only=True, eq=False)
class WorkerConfig:
    """This rank (`rank` of `world_size` data-parallel ranks) and its `num_workers` DataLoader workers."""

    rank: int
    world_size: int
    num_workers: int
    #: the data-parallel process group when not every rank is data parallel (rank/world_size are within it)
    data_parallel_group: torch.distributed.ProcessGroup | None = None
    #: rotates the worker ids after a restore (energon's SavableDataLoader sets it inside workers)
    worker_id_offset: ClassVar[int] = 0
    #: seeds the sample order (the loader seed) and `worker_seed()`
    seed_offset: int = 0
    #: file for `worker_log` lines; may contain "{worker_id}" and "{pid}". None: print to stdout
    worker_debug_path: str | None = None
    #: 0: no logging; 1: log every train batch; 2: also every val batch (as energon's LogSampleDataset)
    worker_log_level: int = 0
    _worker_debug_file: TextIO | None = None
    _worker_debug_file_worker_id: int | None = None
    #: called as handler(exception, sample, sources) when a task-encoder step fails (then the sample is skipped)
    global_error_handler: Callable[[Exception, Any, list | None], None] = log_exception
    #: called when restoring a sample fails
    restore_error_handler: Callable[[Exception, Any, list | None], None] = reraise_exception

    _sample_index_stack: ClassVar[list[int] | None] = None
    active_worker_config: ClassVar[WorkerConfig | None] = None
    _worker_override_global_rank: ClassVar[int | None] = None
    _cache_pool: ClassVar[Any] = None
    #: (batch index, sample index) of the hook being called by energon-arrow's loader (see module docstring)
    index_override: ClassVar[tuple[int, int] | None] = None

    # ---- the iterating worker ----------------------------------------------------------------------------
    def worker_activate(
        self, sample_index: int, override_global_rank: int | None = None, cache_pool: Any = None
    ) -> None:
        """Make this config the active one of the iterating worker, starting at `sample_index`."""
        if WorkerConfig.active_worker_config is not None:
            raise RuntimeError("a worker config is already active in this worker")
        WorkerConfig._sample_index_stack = [sample_index]
        WorkerConfig.active_worker_config = self
        WorkerConfig._worker_override_global_rank = override_global_rank
        WorkerConfig._cache_pool = cache_pool

    def worker_push_sample_index(self, sample_index: int) -> None:
        self._require_active()
        WorkerConfig._sample_index_stack.append(sample_index)

    def worker_pop_sample_index(self) -> int:
        self._require_active()
        return WorkerConfig._sample_index_stack.pop()

    def worker_deactivate(self) -> None:
        if WorkerConfig.active_worker_config is not None:
            if len(WorkerConfig._sample_index_stack) != 1:
                raise RuntimeError(f"sample index stack not unwound: {WorkerConfig._sample_index_stack}")
            WorkerConfig._sample_index_stack = None
            WorkerConfig.active_worker_config = None
            WorkerConfig._worker_override_global_rank = None

    @staticmethod
    def _require_active() -> None:
        if WorkerConfig.active_worker_config is None:
            raise RuntimeError("no worker config is active (only inside an iterating loader)")

    @property
    def active_worker_sample_index(self) -> int:
        """Index of the sample (or batch) the current task-encoder call handles."""
        if WorkerConfig.index_override is not None:
            return WorkerConfig.index_override[1]
        return WorkerConfig._sample_index_stack[-1] * max(self.num_workers, 1) + self.rank_worker_id()

    @property
    def active_worker_batch_index(self) -> int:
        """Index of the batch the current task-encoder call contributes to, counted per rank."""
        if WorkerConfig.index_override is not None:
            return WorkerConfig.index_override[0]
        return WorkerConfig._sample_index_stack[0] * max(self.num_workers, 1) + self.rank_worker_id()

    # ---- ids and seeds -----------------------------------------------------------------------------------
    def global_rank(self) -> int:
        """This rank as a global torch.distributed rank (not the rank within data_parallel_group)."""
        if self.data_parallel_group is None:
            return self.rank
        return torch.distributed.get_global_rank(self.data_parallel_group, self.rank)

    def __eq__(self, other) -> bool:
        """Equal when rank, world size and worker count are (energon compares only these)."""
        if not isinstance(other, WorkerConfig):
            return NotImplemented
        return (self.rank, self.world_size, self.num_workers) == (
            other.rank,
            other.world_size,
            other.num_workers,
        )

    @staticmethod
    def default_worker_config(
        num_workers: int = 4, data_parallel_group: torch.distributed.ProcessGroup | None = None
    ) -> WorkerConfig:
        """Rank and world size from torch.distributed when it is initialised (within `data_parallel_group`),
        else rank 0 of 1."""
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            rank = torch.distributed.get_rank(data_parallel_group)
            world_size = torch.distributed.get_world_size(data_parallel_group)
        else:
            rank, world_size = 0, 1
        return WorkerConfig(
            rank=rank, world_size=world_size, num_workers=num_workers, data_parallel_group=data_parallel_group
        )

    def rank_worker_id(self) -> int:
        """The current DataLoader worker's id within this rank (0 in the main process)."""
        if self._worker_override_global_rank:
            return self._worker_override_global_rank % self.num_workers
        info = torch.utils.data.get_worker_info()
        if info is None:
            return self.worker_id_offset
        return (info.id + self.worker_id_offset) % info.num_workers

    def assert_worker(self) -> None:
        """Check that the current process is one of this rank's configured workers."""
        if self.num_workers <= 1:
            if self.rank_worker_id() != 0:
                raise RuntimeError(f"worker id {self.rank_worker_id()} with num_workers={self.num_workers}")
            return
        info = torch.utils.data.get_worker_info()
        if info is None:
            raise RuntimeError("cannot iterate outside a worker with num_workers > 1")
        if info.num_workers != self.num_workers:
            raise RuntimeError(
                f"this rank runs {info.num_workers} workers, the worker config says {self.num_workers}"
            )

    def global_worker_id(self, override_local_worker_id: int | None = None) -> int:
        """rank * num_workers + the (given or current) worker id."""
        if self._worker_override_global_rank is not None:
            return self._worker_override_global_rank
        if override_local_worker_id is not None:
            return self.rank * self.num_workers + override_local_worker_id
        self.assert_worker()
        return self.rank * self.num_workers + self.rank_worker_id()

    def worker_seed(self, override_local_worker_id: int | None = None) -> int:
        """A 32-bit seed for the (given or current) worker from its global id and `seed_offset` (energon's
        formula: the first 4 bytes of sha1("{global_worker_id},{seed_offset}"))."""
        if self.num_workers == 0:
            global_worker_id = self.rank
        else:
            global_worker_id = self.global_worker_id(override_local_worker_id)
        digest = hashlib.sha1(f"{global_worker_id},{self.seed_offset}".encode()).digest()
        return int.from_bytes(digest, byteorder="big", signed=False) & 0xFFFFFFFF

    def config(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "world_size": self.world_size,
            "num_workers": self.num_workers,
            "data_parallel_group": self.data_parallel_group.size() if self.data_parallel_group else None,
        }

    # ---- logging -----------------------------------------------------------------------------------------
    def should_log(self, level: int) -> bool:
        return level <= self.worker_log_level

    def worker_log(self, data: dict) -> None:
        """Write `data` as one JSON line to the worker's debug file (stdout when worker_debug_path is None)."""
        if self.worker_debug_path is None:
            print(json.dumps(data), flush=True)
            return
        in_worker = torch.utils.data.get_worker_info() is not None
        worker_id = self.rank * (self.num_workers + 1) + self.rank_worker_id() + (1 if in_worker else 0)
        if self._worker_debug_file is None or self._worker_debug_file_worker_id != worker_id:
            if self._worker_debug_file is not None:
                self._worker_debug_file.close()
            path = Path(
                self.worker_debug_path.format(
                    worker_id=worker_id, pid=multiprocessing.current_process().ident
                )
            )
            path.parent.mkdir(exist_ok=True, parents=True)
            self._worker_debug_file = path.open("w")
            self._worker_debug_file_worker_id = worker_id
        self._worker_debug_file.write(json.dumps(data) + "\n")
        self._worker_debug_file.flush()
