"""Batching wrappers: `BatchDataset` (fixed size), `GroupBatchDataset` (per-group buckets) and the savable sample
buffer they (and the shuffle buffer) keep partial batches in: saved as the restore keys of its samples, re-read
on restore by the wrapped dataset's `restore_sample`."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Generator, Hashable, Iterator
from typing import Any, Generic

from energon_arrow.energon.wrappers.base import (
    STATE_CLASS,
    BaseWrapperDataset,
    SampleIndex,
    T_batch,
    T_batch_sample,
    call_seeded,
    callable_config,
    function_config,
    get_sample_restore_key,
    set_sample_restore_key,
    worker_config_dict,
)
from energon_arrow.energon.wrappers.failures import ErrorContext, restore_guarded


class SampleBuffer:
    """Samples held by a wrapper, savable as their restore keys (restored lazily, in the worker)."""

    def __init__(self, dataset):
        self.dataset = dataset
        self.samples: list = []
        self.keys: list = []
        self._pending = False

    def start(self) -> None:
        """Re-read restored samples (call at the start of iteration, in the worker)."""
        if self._pending:
            self._pending = False
            if any(k is None for k in self.keys):
                raise ValueError(
                    f"cannot restore buffered samples of {self.dataset}: some had no __restore_key__ (a buffer is "
                    "saved as the restore keys of its samples)"
                )
            self.samples = [self.dataset.restore_sample(k) for k in self.keys]

    def append(self, sample: Any) -> None:
        self.samples.append(sample)
        self.keys.append(get_sample_restore_key(sample))

    def pop(self, index: int) -> Any:
        self.keys.pop(index)
        return self.samples.pop(index)

    def flush(self) -> tuple[list, tuple]:
        samples, keys = self.samples, tuple(self.keys)
        self.samples, self.keys = [], []
        return samples, keys

    def __len__(self) -> int:
        return len(self.keys)

    def save_state(self) -> dict:
        return {"restore_keys": list(self.keys)}

    def restore_state(self, state: dict | None) -> None:
        self.keys = list((state or {}).get("restore_keys") or [])
        self.samples = []
        self._pending = bool(self.keys)


class BatchDataset(BaseWrapperDataset[T_batch_sample, T_batch], Generic[T_batch_sample, T_batch]):
    """Groups `batch_size` consecutive samples and calls `batcher` on them (energon's BatchDataset). The batcher
    may return a generator of batches; the last partial batch is kept unless `drop_last`."""

    _savable_fields = ("_sample_index", "_buffer", "_generator_sample_keys", "_generator_offset")

    def __init__(
        self,
        dataset,
        batch_size: int,
        batcher: Callable[[list], Any],
        *,
        batcher_stateless: bool = False,
        batcher_config=None,
        drop_last: bool = False,
        failure_tolerance: int = 100,
        worker_config,
    ):
        super().__init__(dataset, worker_config=worker_config)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.batch_size = batch_size
        self.batcher = batcher
        self.batcher_stateless = batcher_stateless
        self.batcher_config = batcher_config
        self.drop_last = drop_last
        self.failure_tolerance = failure_tolerance
        self._failures = ErrorContext(f"BatchDataset.{batcher}", worker_config, failure_tolerance)
        self.reset_state_own()

    def reset_state_own(self) -> None:
        self._sample_index = SampleIndex()
        self._buffer = SampleBuffer(self.dataset)
        self._generator_sample_keys = None
        self._generator_offset = None

    def len_worker(self, worker_idx: int | None = None) -> int:
        n = self.dataset.len_worker(worker_idx)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def _outputs(self, samples: list, keys: tuple, sample_idx: int, skip: int) -> Iterator[Any]:
        out = call_seeded(self.batcher, self.worker_config, sample_idx, samples)
        if not isinstance(out, Generator):
            self._failures.reset()
            yield set_sample_restore_key(out, sample_idx, *keys, src=self)
            return
        self._generator_sample_keys, self._generator_offset = list(keys), skip
        for idx, batch in enumerate(out):
            if idx < skip:
                continue
            self._generator_offset = idx + 1
            self._failures.reset()
            yield set_sample_restore_key(batch, sample_idx, idx, *keys, src=self)
        self._generator_sample_keys = self._generator_offset = None

    def __iter__(self) -> Iterator[Any]:
        self._buffer.start()
        if self._generator_sample_keys is not None:  # resume an unfinished batch generator
            keys = tuple(self._generator_sample_keys)
            samples = [self.dataset.restore_sample(k) for k in keys]
            yield from self._outputs(
                samples, keys, self._sample_index.current_idx - 1, self._generator_offset
            )

        def flush() -> Iterator[Any]:
            samples, keys = self._buffer.flush()
            with self._failures.handle_errors(samples):
                yield from self._outputs(samples, keys, self._sample_index.get_next(), 0)

        for sample in self.dataset:
            self._buffer.append(sample)
            if len(self._buffer) >= self.batch_size:
                yield from flush()
        if len(self._buffer) and not self.drop_last:
            yield from flush()
        self._buffer.flush()

    def can_restore_sample(self) -> bool:
        return super().can_restore_sample() and self.batcher_stateless

    def assert_can_restore(self) -> None:
        if not self.batcher_stateless:
            raise ValueError(f"batcher {self.batcher} must be stateless to restore batches")
        super().assert_can_restore()

    def restore_sample(self, restore_key: tuple) -> Any:
        self.assert_can_restore()
        if inspect.isgeneratorfunction(self.batcher):
            _, sample_idx, sub_idx, *keys = restore_key
        else:
            _, sample_idx, *keys = restore_key
        samples = [self.dataset.restore_sample(k) for k in keys]

        def remake() -> Any:
            out = call_seeded(self.batcher, self.worker_config, sample_idx, samples)
            if isinstance(out, Generator):
                for idx, batch in enumerate(out):
                    if idx == sub_idx:
                        return set_sample_restore_key(batch, sample_idx, sub_idx, *keys, src=self)
                raise ValueError(
                    f"BatchDataset: batch generator yielded fewer than {sub_idx + 1} batches on restore"
                )
            return set_sample_restore_key(out, sample_idx, *keys, src=self)

        return restore_guarded(self.worker_config, samples, remake)

    def config(self) -> dict:
        cfg = {
            "type": type(self).__qualname__,
            "batch_size": self.batch_size,
            "batcher": function_config(self.batcher),
            "batcher_stateless": self.batcher_stateless,
            "drop_last": self.drop_last,
            "worker_config": worker_config_dict(self.worker_config),
            "dataset": self.dataset.config(),
        }
        if self.batcher_config:
            cfg["batcher_config"] = callable_config(self.batcher_config)
        return cfg


class GroupBatchDataset(BaseWrapperDataset[T_batch_sample, T_batch], Generic[T_batch_sample, T_batch]):
    """Sorts samples into buckets by `sample_group_key(sample) -> (bucket, batch_size)` and batches a bucket
    once it holds its batch size (energon's GroupBatchDataset). With `fixed_batch_size`, the key function
    returns batch size None."""

    def __init__(
        self,
        dataset,
        fixed_batch_size: int | None,
        sample_group_key: Callable[[Any], tuple[Hashable, int | None]],
        batcher: Callable[[list], Any],
        *,
        batcher_stateless: bool = False,
        batcher_config=None,
        drop_last: bool = False,
        failure_tolerance: int = 100,
        worker_config,
    ):
        super().__init__(dataset, worker_config=worker_config)
        if inspect.isgeneratorfunction(batcher):
            raise ValueError(f"GroupBatchDataset: batcher {batcher} must not be a generator function")
        self.fixed_batch_size = fixed_batch_size
        self.sample_group_key = sample_group_key
        self.batcher = batcher
        self.batcher_stateless = batcher_stateless
        self.batcher_config = batcher_config
        self.drop_last = drop_last
        self.failure_tolerance = failure_tolerance
        self._batch_failures = ErrorContext(f"GroupBatchDataset.{batcher}", worker_config, failure_tolerance)
        self._key_failures = ErrorContext(
            f"GroupBatchDataset.{sample_group_key}", worker_config, failure_tolerance
        )
        self.reset_state_own()

    def reset_state_own(self) -> None:
        self._batch_index = SampleIndex()
        self._buckets: dict[Hashable, tuple[int, SampleBuffer]] = {}

    def len_worker(self, worker_idx: int | None = None) -> int:
        return self.dataset.len_worker(worker_idx)  # an upper bound, as in energon

    def _group(self, sample: Any) -> tuple[Hashable, int]:
        key, size = self.sample_group_key(sample)
        if (size is None) == (self.fixed_batch_size is None):
            raise ValueError(
                f"group {key!r}: sample_group_key returned batch size {size} with fixed_batch_size="
                f"{self.fixed_batch_size}; exactly one of them must be None"
            )
        return key, size if size is not None else self.fixed_batch_size

    def _flush(self, buffer: SampleBuffer) -> Iterator[Any]:
        samples, keys = buffer.flush()
        with self._batch_failures.handle_errors(samples):
            sample_idx = self._batch_index.get_next()
            out = self.batcher(samples)
            self._batch_failures.reset()
            yield set_sample_restore_key(out, sample_idx, *keys, src=self)

    def __iter__(self) -> Iterator[Any]:
        for _, buffer in self._buckets.values():
            buffer.start()
        for sample in self.dataset:
            group = None
            with self._key_failures.handle_errors(sample):
                group = self._group(sample)
            if group is None:
                continue
            key, size = group
            if key not in self._buckets:
                self._buckets[key] = (size, SampleBuffer(self.dataset))
            elif self._buckets[key][0] != size:
                raise ValueError(f"group {key!r}: batch size {size} differs from {self._buckets[key][0]}")
            buffer = self._buckets[key][1]
            buffer.append(sample)
            if len(buffer) >= size:
                yield from self._flush(buffer)
        if not self.drop_last:
            for _, buffer in list(self._buckets.values()):
                if len(buffer):
                    yield from self._flush(buffer)
        self._buckets.clear()

    def save_state(self) -> dict:
        return {
            STATE_CLASS: type(self).__name__,
            "batch_sample_index": self._batch_index.save_state(),
            "buckets": [[k, size, buf.save_state()] for k, (size, buf) in self._buckets.items()],
            "datasets": [self.dataset.save_state()],
        }

    def restore_state(self, state: dict) -> None:
        if state.get(STATE_CLASS) != type(self).__name__:
            raise ValueError(f"state of {state.get(STATE_CLASS)!r} cannot be restored into GroupBatchDataset")
        self.dataset.restore_state(state["datasets"][0])
        self._batch_index.restore_state(state["batch_sample_index"])
        self._buckets = {}
        for key, size, buf_state in state["buckets"]:
            buffer = SampleBuffer(self.dataset)
            buffer.restore_state(buf_state)
            self._buckets[key if not isinstance(key, list) else tuple(key)] = (size, buffer)

    def can_restore_sample(self) -> bool:
        return super().can_restore_sample() and self.batcher_stateless

    def restore_sample(self, restore_key: tuple) -> Any:
        if not self.batcher_stateless:
            raise ValueError(f"batcher {self.batcher} must be stateless to restore batches")
        _, sample_idx, *keys = restore_key
        samples = [self.dataset.restore_sample(k) for k in keys]
        return restore_guarded(
            self.worker_config,
            samples,
            lambda: set_sample_restore_key(self.batcher(samples), sample_idx, *keys, src=self),
        )

    def config(self) -> dict:
        cfg = {
            "type": type(self).__qualname__,
            "bucket": function_config(self.sample_group_key),
            "batcher": function_config(self.batcher),
            "batcher_stateless": self.batcher_stateless,
            "drop_last": self.drop_last,
            "worker_config": worker_config_dict(self.worker_config),
            "dataset": self.dataset.config(),
        }
        if self.batcher_config:
            cfg["batcher_config"] = callable_config(self.batcher_config)
        return cfg
