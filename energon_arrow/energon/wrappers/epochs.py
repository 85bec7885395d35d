"""Wrappers that change how long an epoch is or in which order samples come: `RepeatDataset`, `LimitDataset`,
`EpochizeDataset`, `ShuffleBufferDataset`. Lengths are split over a rank's workers as energon does: worker k of
K gets length // K samples, plus one for the first length % K workers."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, Generic

from energon_arrow.energon.wrappers.base import (
    BaseWrapperDataset,
    T_sample,
    WorkerRng,
    rank_worker_id,
    worker_config_dict,
)
from energon_arrow.energon.wrappers.batch import SampleBuffer


def local_share(length: int, num_workers: int, worker_idx: int) -> int:
    """Worker `worker_idx`'s share of `length` samples over `num_workers` workers (all of it without workers)."""
    if num_workers <= 1:
        return length
    return length // num_workers + (1 if worker_idx < length % num_workers else 0)


class RepeatDataset(BaseWrapperDataset[T_sample, T_sample], Generic[T_sample]):
    """Repeats the dataset `repeats` times (None: forever; a fraction repeats part of it the last time)."""

    _savable_fields = ("_repetition", "_index")

    def __init__(self, dataset, *, repeats: int | float | None = None, restart: bool = True, worker_config):
        super().__init__(dataset, worker_config=worker_config)
        self.repeats = repeats
        self.restart = restart
        self.reset_state_own()

    def reset_state_own(self) -> None:
        self._repetition = 0
        self._index = 0

    def len_worker(self, worker_idx: int | None = None) -> int:
        n = self.dataset.len_worker(worker_idx)
        return n if self.repeats is None else int(n * self.repeats)

    def __iter__(self) -> Iterator[Any]:
        if self.repeats is None and not self.dataset.worker_has_samples():
            raise ValueError("RepeatDataset: cannot repeat an empty dataset forever")
        n = self.dataset.len_worker()
        while self.repeats is None or self._repetition < self.repeats:
            stop_after = None
            if self.repeats is not None and self._repetition == math.floor(self.repeats):
                stop_after = math.floor(n * (self.repeats - math.floor(self.repeats)))
                if self._index >= stop_after:
                    break
            for sample in self.dataset:
                self._index += 1
                yield sample
                if stop_after is not None and self._index >= stop_after:
                    break
            self._repetition += 1
            self._index = 0
        self._repetition = 0 if self.restart else math.ceil(self.repeats)

    def config(self) -> dict:
        return {
            "type": type(self).__qualname__,
            "dataset": self.dataset.config(),
            "repeats": self.repeats,
            "worker_config": worker_config_dict(self.worker_config),
        }


class LimitDataset(BaseWrapperDataset[T_sample, T_sample], Generic[T_sample]):
    """At most `length` samples per epoch over the rank (split over its workers); the inner dataset restarts
    from its beginning at every epoch."""

    _savable_fields = ("current_offset",)

    def __init__(self, dataset, length: int, *, reset_after_epoch: bool = False, worker_config):
        super().__init__(dataset, worker_config=worker_config)
        self.length = length
        self.reset_after_epoch = reset_after_epoch
        self.reset_state_own()

    def reset_state_own(self) -> None:
        self.current_offset = 0

    def len_worker(self, worker_idx: int | None = None) -> int:
        k = rank_worker_id(self.worker_config) if worker_idx is None else worker_idx
        return local_share(self.length, self.worker_config.num_workers, k)

    def len_rank(self) -> int:
        return min(self.length, self.dataset.len_rank())

    def __iter__(self) -> Iterator[Any]:
        limit = self.len_worker()
        if self.current_offset < limit:
            it = iter(self.dataset)
            try:
                for offset in range(self.current_offset, limit):
                    try:
                        sample = next(it)
                    except StopIteration:
                        break
                    self.current_offset = offset + 1
                    yield sample
            finally:
                it.close()
        self.dataset.reset_state_deep()
        self.current_offset = 0

    def worker_has_samples(self) -> bool:
        return super().worker_has_samples() and self.length > 0

    def config(self) -> dict:
        return {
            "type": type(self).__qualname__,
            "dataset": self.dataset.config(),
            "length": self.length,
            "reset_after_epoch": self.reset_after_epoch,
            "worker_config": worker_config_dict(self.worker_config),
        }


class EpochizeDataset(BaseWrapperDataset[T_sample, T_sample], Generic[T_sample]):
    """Epochs of `length` samples (split over the rank's workers) cut from the inner dataset, whose iterator
    stays alive from one epoch to the next and restarts only when exhausted."""

    _savable_fields = ("_offset",)

    def __init__(self, dataset, length: int, worker_config):
        super().__init__(dataset, worker_config=worker_config)
        self.length = length
        self._active_iter = None
        self.reset_state_own()

    def reset_state_own(self) -> None:
        self._offset = 0

    def restore_state(self, state: dict) -> None:
        super().restore_state(state)
        self._active_iter = None  # the inner dataset continues from its restored state

    def len_worker(self, worker_idx: int | None = None) -> int:
        k = rank_worker_id(self.worker_config) if worker_idx is None else worker_idx
        return local_share(self.length, self.worker_config.num_workers, k)

    def __iter__(self) -> Iterator[Any]:
        local = self.len_worker()
        for idx in range(self._offset, local):
            if self._active_iter is None:
                self._active_iter = iter(self.dataset)
            self._offset = (idx + 1) % local
            try:
                sample = next(self._active_iter)
            except StopIteration:  # the inner dataset ended: the next epoch starts it again, whole
                self._active_iter = None
                self._offset = 0
                break
            yield sample

    def config(self) -> dict:
        return {
            "type": type(self).__qualname__,
            "dataset": self.dataset.config(),
            "length": self.length,
            "worker_config": worker_config_dict(self.worker_config),
        }


class ShuffleBufferDataset(BaseWrapperDataset[T_sample, T_sample], Generic[T_sample]):
    """Keeps `size` samples and yields a random one of them each time (energon's ShuffleBufferDataset)."""

    _savable_fields = ("_active_buffer", "_worker_rng")

    def __init__(self, dataset, size: int, *, worker_config):
        super().__init__(dataset, worker_config=worker_config)
        self.size = size
        self.reset_state_own()

    def reset_state_own(self) -> None:
        self._worker_rng = WorkerRng(self.worker_config)
        self._active_buffer = SampleBuffer(self.dataset)

    def len_worker(self, worker_idx: int | None = None) -> int:
        return self.dataset.len_worker(worker_idx)

    def __iter__(self) -> Iterator[Any]:
        buf = self._active_buffer
        buf.start()
        it = iter(self.dataset)
        while True:
            if len(buf) >= self.size:
                yield buf.pop(self._worker_rng.randbelow(len(buf)))
                continue
            try:
                buf.append(next(it))
            except StopIteration:
                break
        while len(buf):
            yield buf.pop(self._worker_rng.randbelow(len(buf)))

    def restore_sample(self, restore_key: tuple) -> Any:
        return self.dataset.restore_sample(restore_key)

    def config(self) -> dict:
        return {
            "type": type(self).__qualname__,
            "dataset": self.dataset.config(),
            "size": self.size,
            "worker_config": worker_config_dict(self.worker_config),
        }
