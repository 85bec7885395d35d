"""Batches of Nanoset samples in Megatron's pretraining order, sliced per data-parallel rank, resumable exactly.

Global batch g covers samples `[c + g*G, c + (g+1)*G)` of the dataset (`c` = consumed samples at start,
`G` = micro_batch_size * data_parallel_size, the last incomplete global batch dropped), and data-parallel rank r
takes the micro batch `[r*m, (r+1)*m)` of it, like Megatron's `MegatronPretrainingSampler`. Each micro batch is
one `get_batch` call (one vectorised read per token file) and goes through the shared host-to-device stage
(`loader.transfer`: pinned buffers and an async copy when CUDA is available). The state is the number of consumed
samples, counted when a batch is handed to the caller, so `load_state_dict(state_dict())` resumes at the next
unseen batch.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np


class NanosetLoader:
    """Iterate micro batches (dicts of tensors, see `Nanoset.get_batch`) of this data-parallel rank."""

    def __init__(
        self,
        dataset,
        micro_batch_size: int,
        *,
        data_parallel_rank: int | None = None,
        data_parallel_size: int | None = None,
        consumed_samples: int = 0,
        device=None,
        depth: int = 2,
    ):
        if micro_batch_size < 1:
            raise ValueError(f"micro_batch_size must be positive, got {micro_batch_size}")
        from energon_arrow.loader.ranks import distributed_rank_world

        rank, size = distributed_rank_world(data_parallel_rank, data_parallel_size)
        if not 0 <= rank < size:
            raise ValueError(f"data-parallel rank {rank} outside [0, {size})")
        if consumed_samples < 0 or consumed_samples > len(dataset):
            raise ValueError(f"consumed_samples {consumed_samples} outside [0, {len(dataset)}]")
        self.dataset = dataset
        self.micro_batch_size = micro_batch_size
        self.rank, self.size = rank, size
        self.global_batch_size = micro_batch_size * size
        self.consumed_samples = consumed_samples
        self.device = device
        self.depth = depth

    def __len__(self) -> int:
        """Micro batches left for this rank."""
        return (len(self.dataset) - self.consumed_samples) // self.global_batch_size

    def sample_ids(self, consumed: int) -> np.ndarray:
        """The dataset indices of this rank's micro batch in the global batch that starts at `consumed`."""
        start = consumed + self.rank * self.micro_batch_size
        return np.arange(start, start + self.micro_batch_size, dtype=np.int64)

    def _host_batches(self, start: int) -> Iterator[dict]:
        for consumed in range(start, len(self.dataset) - self.global_batch_size + 1, self.global_batch_size):
            yield self.dataset.get_batch(self.sample_ids(consumed))

    def __iter__(self) -> Iterator[dict]:
        from energon_arrow.loader.transfer import iter_to_device

        for batch in iter_to_device(self._host_batches(self.consumed_samples), self.device, self.depth):
            self.consumed_samples += self.global_batch_size
            yield batch

    def state_dict(self) -> dict:
        return {"consumed_samples": self.consumed_samples}

    def load_state_dict(self, state: dict) -> None:
        consumed = int(state["consumed_samples"])
        if consumed < 0 or consumed > len(self.dataset):
            raise ValueError(f"consumed_samples {consumed} outside [0, {len(self.dataset)}]")
        self.consumed_samples = consumed
