"""Per-sample wrappers: `MapDataset`, `FilterDataset`, `IterMapDataset`, `LogSampleDataset`, `GcDataset`.

MapDataset's function may return one sample or a generator of samples; an unfinished generator is saved as the
restore key of its input sample plus the number of outputs already yielded, and resumed by re-reading that sample
and skipping those outputs (energon's semantics; the function must then be deterministic).
"""

from __future__ import annotations

import gc
import inspect
from collections.abc import Callable, Generator, Iterator
from typing import Any, Generic

from energon_arrow.energon.wrappers.base import (
    BaseWrapperDataset,
    SampleIndex,
    T_sample,
    T_sample_in,
    T_sample_out,
    add_sample_restore_key,
    call_seeded,
    callable_config,
    function_config,
    get_sample_restore_key,
    global_worker_id,
    set_sample_restore_key,
)
from energon_arrow.energon.wrappers.failures import ErrorContext, restore_guarded


class MapDataset(BaseWrapperDataset[T_sample_in, T_sample_out], Generic[T_sample_in, T_sample_out]):
    """Applies `map_fn` to every sample (energon's MapDataset)."""

    _savable_fields = ("_sample_index", "_generator_sample_key", "_generator_offset")

    def __init__(
        self,
        dataset,
        map_fn: Callable,
        *,
        stateless_map_fn: bool = False,
        map_fn_config: dict | Callable | None = None,
        failure_tolerance: int = 100,
        worker_config,
    ):
        super().__init__(dataset, worker_config=worker_config)
        self.map_fn = map_fn
        self.stateless_map_fn = stateless_map_fn
        self.map_fn_config = map_fn_config
        self.failure_tolerance = failure_tolerance
        self._failures = ErrorContext(f"MapDataset.{map_fn}", worker_config, failure_tolerance)
        self.reset_state_own()

    def reset_state_own(self) -> None:
        self._sample_index = SampleIndex()
        self._generator_sample_key = None
        self._generator_offset = None

    def len_worker(self, worker_idx: int | None = None) -> int:
        return self.dataset.len_worker(worker_idx)

    def _drain(self, outputs: Generator, sample_idx: int, skip: int) -> Iterator[Any]:
        for idx, out in enumerate(outputs):
            if idx < skip:
                continue
            self._generator_offset = idx + 1
            self._failures.reset()
            yield add_sample_restore_key(out, sample_idx, idx, src=self)
        self._generator_sample_key = None
        self._generator_offset = None

    def __iter__(self) -> Iterator[Any]:
        if self._generator_sample_key is not None:  # resume an unfinished generator
            sample = self.dataset.restore_sample(self._generator_sample_key)
            sample_idx = self._sample_index.current_idx - 1
            outputs = call_seeded(self.map_fn, self.worker_config, sample_idx, sample)
            yield from self._drain(outputs, sample_idx, self._generator_offset or 0)
        for sample in self.dataset:
            key = get_sample_restore_key(sample)
            with self._failures.handle_errors(sample):
                sample_idx = self._sample_index.get_next()
                out = call_seeded(self.map_fn, self.worker_config, sample_idx, sample)
                if isinstance(out, Generator):
                    self._generator_sample_key, self._generator_offset = key, 0
                    yield from self._drain(out, sample_idx, 0)
                else:
                    self._failures.reset()
                    yield add_sample_restore_key(out, sample_idx, src=self)

    def can_restore_sample(self) -> bool:
        return super().can_restore_sample() and self.stateless_map_fn

    def assert_can_restore(self) -> None:
        if not self.stateless_map_fn:
            raise ValueError(f"MapDataset can only restore samples if map_fn {self.map_fn} is stateless")
        super().assert_can_restore()

    def restore_sample(self, restore_key: tuple) -> Any:
        self.assert_can_restore()
        if inspect.isgeneratorfunction(self.map_fn):
            _, sample_idx, local_idx, *inner = restore_key
        else:
            _, sample_idx, *inner = restore_key
        inner_sample = self.dataset.restore_sample(tuple(inner))

        def remake() -> Any:
            out = call_seeded(self.map_fn, self.worker_config, sample_idx, inner_sample)
            if isinstance(out, Generator):
                for idx, o in enumerate(out):
                    if idx == local_idx:
                        return add_sample_restore_key(o, sample_idx, local_idx, src=self)
                raise ValueError(
                    f"MapDataset: generator yielded fewer than {local_idx + 1} samples on restore"
                )
            return add_sample_restore_key(out, sample_idx, src=self)

        return restore_guarded(self.worker_config, inner_sample, remake)

    def config(self) -> dict:
        cfg = {
            "type": type(self).__qualname__,
            "dataset": self.dataset.config(),
            "map_fn": function_config(self.map_fn),
            "map_fn_stateless": self.stateless_map_fn,
        }
        if self.map_fn_config:
            cfg["map_fn_config"] = callable_config(self.map_fn_config)
        return cfg


class FilterDataset(BaseWrapperDataset[T_sample, T_sample], Generic[T_sample]):
    """Yields the samples for which `filter_fn` returns True (energon's FilterDataset)."""

    _savable_fields = ("_sample_index",)

    def __init__(self, dataset, *, filter_fn: Callable, filter_fn_config=None, worker_config):
        super().__init__(dataset, worker_config=worker_config)
        self.filter_fn = filter_fn
        self.filter_fn_config = filter_fn_config
        self.reset_state_own()

    def reset_state_own(self) -> None:
        self._sample_index = SampleIndex()

    def len_worker(self, worker_idx: int | None = None) -> int:
        return self.dataset.len_worker(worker_idx)

    def __iter__(self) -> Iterator[Any]:
        for sample in self.dataset:
            self._sample_index.get_next()
            if self.filter_fn(sample):
                yield sample

    def config(self) -> dict:
        cfg = {
            "type": type(self).__qualname__,
            "dataset": self.dataset.config(),
            "filter_fn": function_config(self.filter_fn),
        }
        if self.filter_fn_config:
            cfg["filter_fn_config"] = callable_config(self.filter_fn_config)
        return cfg


class IterMapDataset(BaseWrapperDataset[T_sample_in, T_sample_out], Generic[T_sample_in, T_sample_out]):
    """Applies `iter_map_fn` to the whole stream of samples (energon's IterMapDataset). Savable when the
    function is stateless: the restore key of an output lists the inputs consumed since the previous output."""

    _savable_fields = ("_sample_index",)

    def __init__(
        self,
        dataset,
        iter_map_fn: Callable[[Iterator[Any]], Iterator[Any]],
        *,
        len_map_fn: Callable[[int], int] = lambda x: x,
        stateless_iter_fn: bool = False,
        iter_map_fn_config=None,
        worker_config,
    ):
        super().__init__(dataset, worker_config=worker_config)
        self.iter_map_fn = iter_map_fn
        self.len_map_fn = len_map_fn
        self.stateless_iter_fn = stateless_iter_fn
        self.iter_map_fn_config = iter_map_fn_config
        self.reset_state_own()

    def reset_state_own(self) -> None:
        self._sample_index = SampleIndex()

    def len_worker(self, worker_idx: int | None = None) -> int:
        return self.len_map_fn(self.dataset.len_worker(worker_idx))

    def __iter__(self) -> Iterator[Any]:
        consumed: list = []
        iter_idx = 0

        def inputs() -> Iterator[Any]:
            nonlocal iter_idx
            for sample in self.dataset:
                iter_idx = 0
                consumed.append(get_sample_restore_key(sample))
                yield sample

        for out in self.iter_map_fn(inputs()):
            sample_idx = self._sample_index.get_next()
            yield set_sample_restore_key(out, sample_idx, iter_idx, *consumed, src=self)
            consumed.clear()
            iter_idx += 1

    def can_restore_sample(self) -> bool:
        return super().can_restore_sample() and self.stateless_iter_fn

    def assert_can_restore(self) -> None:
        if not self.stateless_iter_fn:
            raise ValueError("IterMapDataset can only restore samples if iter_map_fn is stateless")
        super().assert_can_restore()

    def restore_sample(self, restore_key: tuple) -> Any:
        self.assert_can_restore()
        _, sample_idx, iter_idx, *inner = restore_key
        inputs = [self.dataset.restore_sample(k) for k in inner]

        def remake() -> Any:
            for idx, out in enumerate(self.iter_map_fn(iter(inputs))):
                if idx == iter_idx:
                    return set_sample_restore_key(out, sample_idx, iter_idx, *inner, src=self)
            raise ValueError("IterMapDataset: iter_map_fn yielded too few samples on restore")

        return restore_guarded(self.worker_config, inputs, remake)

    def config(self) -> dict:
        cfg = {
            "type": type(self).__qualname__,
            "dataset": self.dataset.config(),
            "iter_map_fn": function_config(self.iter_map_fn),
            "len_map_fn": function_config(self.len_map_fn),
        }
        if self.iter_map_fn_config:
            cfg["iter_map_fn_config"] = callable_config(self.iter_map_fn_config)
        return cfg


def default_get_batch_keys(sample: Any) -> list | None:
    key = sample.get("__key__") if isinstance(sample, dict) else getattr(sample, "__key__", None)
    if key is None:
        return None
    return list(key) if isinstance(key, (list, tuple)) else [key]


class LogSampleDataset(BaseWrapperDataset[T_sample, T_sample], Generic[T_sample]):
    """Writes a `yield_batch` record of every yielded sample to the worker debug log (energon's LogSampleDataset;
    `WorkerConfig(worker_debug_path=..., worker_log_level >= 1)`)."""

    _savable_fields = ("_step",)

    def __init__(self, dataset, mode: str, worker_config, get_keys_fn: Callable = default_get_batch_keys):
        super().__init__(dataset, worker_config=worker_config)
        self.mode = mode
        self.get_keys_fn = get_keys_fn
        self.reset_state_own()

    def reset_state_own(self) -> None:
        self._step = 0

    def len_worker(self, worker_idx: int | None = None) -> int:
        return self.dataset.len_worker(worker_idx)

    def __iter__(self) -> Iterator[Any]:
        wc = self.worker_config
        logging_on = wc.should_log(1)
        for sample in self.dataset:
            if logging_on:
                keys = self.get_keys_fn(sample)
                record = {"t": "yield_batch", "r": wc.rank, "w": global_worker_id(wc), "m": self.mode}
                wc.worker_log({**record, "idx": self._step, **({} if keys is None else {"keys": keys})})
            self._step += 1
            yield sample

    def config(self) -> dict:
        return self.dataset.config()


class GcDataset(BaseWrapperDataset[T_sample, T_sample], Generic[T_sample]):
    """Runs `gc.collect()` every `every_n_iter` samples, optionally with `gc.freeze()` around the loop."""

    def __init__(self, dataset, *, worker_config, every_n_iter: int = 10, freeze: bool = True):
        super().__init__(dataset, worker_config=worker_config)
        self.every_n_iter = every_n_iter
        self.freeze = freeze

    def reset_state_own(self) -> None:
        return None

    def len_worker(self, worker_idx: int | None = None) -> int:
        return self.dataset.len_worker(worker_idx)

    def __iter__(self) -> Iterator[Any]:
        if self.freeze:
            gc.collect()
            gc.freeze()
        try:
            n = 0
            for sample in self.dataset:
                yield sample
                n += 1
                if n >= self.every_n_iter:
                    gc.collect()
                    n = 0
        finally:
            if self.freeze:
                gc.unfreeze()

    def config(self) -> dict:
        return self.dataset.config()
