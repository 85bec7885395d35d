"""Wrappers over several datasets: `BlendDataset` (random choice by weight), `MixBatchDataset` (blend + batch)
and `ConcatDataset` (one after the other)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic

import numpy as np

from energon_arrow.energon.wrappers.base import (
    BaseWrapperDataset,
    SavableDataset,
    T_batch,
    T_sample,
    T_sample_in,
    WorkerRng,
    add_sample_restore_key,
    worker_config_dict,
)
from energon_arrow.energon.wrappers.batch import BatchDataset


class BlendDataset(BaseWrapperDataset[T_sample, T_sample]):
    """Draws each sample from one of the datasets with probability proportional to its weight (energon's
    BlendDataset); a dataset that runs out is dropped from the draw, and the blend ends when all have."""

    _savable_fields = ("exhausted", "_worker_rng")

    def __init__(self, *dataset_weights: tuple[SavableDataset, float], worker_config):
        if not dataset_weights:
            raise ValueError("BlendDataset needs at least one (dataset, weight) pair")
        datasets, weights = zip(*dataset_weights)
        super().__init__(datasets, worker_config=worker_config)
        if any(w <= 0 for w in weights):
            raise ValueError(f"BlendDataset: all weights must be > 0, got {list(weights)}")
        self.weights = tuple(float(w) for w in weights)
        self.dataset_weights = tuple(zip(self.datasets, weights))
        self.reset_state_own()

    def reset_state_own(self) -> None:
        self._worker_rng = WorkerRng(self.worker_config)
        self.exhausted = [False] * len(self.weights)

    def len_worker(self, worker_idx: int | None = None) -> int:
        return sum(d.len_worker(worker_idx) for d in self.datasets)

    def __iter__(self) -> Iterator[Any]:
        if not self.worker_has_samples():
            raise ValueError("BlendDataset: no samples on this worker in any blended dataset")
        iters: list = []
        weights = np.zeros(len(self.datasets))
        for i, d in enumerate(self.datasets):
            if d.worker_has_samples() and not self.exhausted[i]:
                iters.append(iter(d))
                weights[i] = self.weights[i]
            else:
                iters.append(None)
                self.exhausted[i] = True
        while any(it is not None for it in iters):
            i = self._worker_rng.choice_idx(weights)
            if iters[i] is None:
                continue
            try:
                sample = next(iters[i])
            except StopIteration:
                iters[i], weights[i], self.exhausted[i] = None, 0.0, True
                continue
            yield add_sample_restore_key(sample, i, src=self)
        self.exhausted = [False] * len(self.datasets)

    def config(self) -> dict:
        return {
            "type": type(self).__qualname__,
            "dataset_weights": [(d.config(), w) for d, w in zip(self.datasets, self.weights)],
            "worker_config": worker_config_dict(self.worker_config),
        }


class MixBatchDataset(BaseWrapperDataset[T_sample_in, T_batch], Generic[T_sample_in, T_batch]):
    """Blends several (batched) datasets and mixes `batch_size` of their items with `batch_mix_fn`
    (energon's MixBatchDataset: a BatchDataset over a BlendDataset)."""

    def __init__(
        self,
        *dataset_weights: tuple[SavableDataset, float],
        batch_size: int,
        batch_mix_fn: Callable[[list], Any] = lambda x: x,
        worker_config,
    ):
        inner = BatchDataset(
            BlendDataset(*dataset_weights, worker_config=worker_config),
            batch_size=batch_size,
            batcher=batch_mix_fn,
            worker_config=worker_config,
        )
        super().__init__(inner, worker_config=worker_config)

    def reset_state_own(self) -> None:
        return None

    def len_worker(self, worker_idx: int | None = None) -> int:
        return self.dataset.len_worker(worker_idx)

    def __iter__(self) -> Iterator[Any]:
        yield from self.dataset

    def config(self) -> dict:
        return {"type": type(self).__qualname__, "dataset": self.dataset.config()}


class ConcatDataset(BaseWrapperDataset[T_sample, T_sample], Generic[T_sample]):
    """All samples of the first dataset, then of the second, ... (energon's ConcatDataset; finite datasets)."""

    _savable_fields = ("_current",)

    def __init__(self, *datasets: SavableDataset, worker_config):
        super().__init__(datasets, worker_config=worker_config)
        self.reset_state_own()

    def reset_state_own(self) -> None:
        self._current = 0

    def len_worker(self, worker_idx: int | None = None) -> int:
        return sum(d.len_worker(worker_idx) for d in self.datasets)

    def __iter__(self) -> Iterator[Any]:
        while self._current < len(self.datasets):
            i = self._current
            for sample in self.datasets[i]:
                yield add_sample_restore_key(sample, i, src=self)
            self._current = i + 1
        self._current = 0

    def config(self) -> dict:
        return {"type": type(self).__qualname__, "datasets": [d.config() for d in self.datasets]}
