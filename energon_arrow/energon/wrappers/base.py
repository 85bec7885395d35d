"""energon's savable-dataset protocol: `SavableDataset`, `BaseWrapperDataset`, sample restore keys, `WorkerRng`.

A pipeline (a core dataset wrapped by Map/Batch/Blend/... datasets) is iterated once per DataLoader worker. Each
worker's copy keeps its own state; `save_state()` returns it as plain dicts/lists/ints (picklable, JSON-able) and
`restore_state(state)` puts a fresh copy back to exactly that point. Buffers (shuffle buffer, group buckets,
unfinished generator outputs) are saved as the *restore keys* of the samples they hold and re-read by
`restore_sample(key)`: the core dataset reads any sample by its key directly from the index.

The worker a copy runs in (`rank_worker_id`: the DataLoader worker id, 0 without workers) decides its samples
and its seed (`worker_seed`).
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

import numpy as np
import torch

STATE_CLASS = "__class__"

# energon's type parameters of its generic datasets (`SavableDataset[T_sample]`, `MapDataset[T_in, T_out]`, ...)
T_sample = TypeVar("T_sample")
T_sample_in = TypeVar("T_sample_in")
T_sample_out = TypeVar("T_sample_out")
T_encoded_sample = TypeVar("T_encoded_sample")
T_batch_sample = TypeVar("T_batch_sample")
T_batch = TypeVar("T_batch")


# ---- the worker a dataset copy runs in -----------------------------------------------------------------------
def num_worker_slots(worker_config) -> int:
    """Worker processes of one rank; 0 workers iterate in the main process as one slot."""
    return max(1, int(worker_config.num_workers))


_AS_WORKER: list[int | None] = [None]


@contextlib.contextmanager
def as_worker(worker_idx: int):
    """Act as worker `worker_idx` of the rank (its seeds and samples) for a loader's `restore_sample`."""
    saved, _AS_WORKER[0] = _AS_WORKER[0], int(worker_idx)
    try:
        yield
    finally:
        _AS_WORKER[0] = saved


def rank_worker_id(worker_config) -> int:
    """This process's worker index within its rank (0 in the main process, unless inside `as_worker`)."""
    if _AS_WORKER[0] is not None:
        return _AS_WORKER[0]
    info = torch.utils.data.get_worker_info()
    if info is None:
        return 0
    return info.id


def global_worker_id(worker_config, worker_idx: int | None = None) -> int:
    k = rank_worker_id(worker_config) if worker_idx is None else worker_idx
    return int(worker_config.rank) * num_worker_slots(worker_config) + k


def worker_seed(worker_config, worker_idx: int | None = None) -> int:
    """A seed for this worker: a function of (seed_offset, rank, worker index) only."""
    k = rank_worker_id(worker_config) if worker_idx is None else worker_idx
    seq = np.random.SeedSequence([int(getattr(worker_config, "seed_offset", 0)), int(worker_config.rank), k])
    return int(seq.generate_state(1, np.uint64)[0]) & 0x7FFFFFFFFFFFFFFF


def worker_config_dict(worker_config) -> dict:
    return {
        "rank": int(worker_config.rank),
        "world_size": int(worker_config.world_size),
        "num_workers": int(worker_config.num_workers),
        "seed_offset": int(getattr(worker_config, "seed_offset", 0)),
    }


def call_seeded(fn: Callable, worker_config, sample_idx: int, arg: Any) -> Any:
    """`fn(arg)`; a `@stateless(restore_seeds=True)` function is called with `random`, numpy and torch seeded
    from (worker seed, sample index), so a resumed run or `restore_sample` reproduces its randomness."""
    if getattr(fn, "__restore_seeds__", False):
        seq = np.random.SeedSequence([worker_seed(worker_config), int(sample_idx)])
        seed = int(seq.generate_state(1, np.uint64)[0]) & 0x7FFFFFFFFFFFFFFF
        random.seed(seed)
        np.random.seed(seed & 0xFFFFFFFF)
        torch.manual_seed(seed)
    return fn(arg)


class WorkerRng:
    """A per-worker random generator (seeded by `worker_seed`), savable as its bit-generator state."""

    def __init__(self, worker_config):
        self.worker_config = worker_config
        self._rng: np.random.Generator | None = None

    @property
    def rng(self) -> np.random.Generator:
        if self._rng is None:
            self._rng = np.random.Generator(np.random.PCG64(worker_seed(self.worker_config)))
        return self._rng

    def randbelow(self, n: int) -> int:
        return int(self.rng.integers(n))

    def choice_idx(self, probs: np.ndarray) -> int:
        if len(probs) == 1:
            return 0
        cdf = np.cumsum(probs)
        return int(np.searchsorted(cdf, self.rng.random() * cdf[-1], side="right"))

    def save_state(self) -> dict:
        return {"rng": copy.deepcopy(self.rng.bit_generator.state)}

    def restore_state(self, state: dict) -> None:
        if state is None or state.get("rng") is None:
            self._rng = None
            return
        bg = np.random.PCG64()
        bg.state = state["rng"]
        self._rng = np.random.Generator(bg)


class SampleIndex:
    """A per-worker counter of the samples a wrapper produced (part of restore keys, like energon's)."""

    def __init__(self) -> None:
        self.current_idx = 0

    def get_next(self) -> int:
        self.current_idx += 1
        return self.current_idx - 1

    def save_state(self) -> int:
        return self.current_idx

    def restore_state(self, state: int | None) -> None:
        self.current_idx = 0 if state is None else int(state)


_STATEFUL = (WorkerRng, SampleIndex)


# ---- restore keys ------------------------------------------------------------------------------------------
def get_sample_restore_key(sample: Any) -> tuple | None:
    if isinstance(sample, dict):
        return sample.get("__restore_key__")
    return getattr(sample, "__restore_key__", None)


def _put_key(sample: Any, key: tuple) -> Any:
    if isinstance(sample, dict):
        if "__restore_key__" in sample:
            sample["__restore_key__"] = key
    elif hasattr(sample, "__restore_key__"):
        with contextlib.suppress(AttributeError):  # frozen samples keep their key
            sample.__restore_key__ = key
    return sample


def add_sample_restore_key(sample: Any, *key, src: Any) -> Any:
    """Prefix the sample's restore key with (wrapper class name, *key)."""
    inner = get_sample_restore_key(sample)
    if inner is None:
        return sample
    return _put_key(sample, (type(src).__name__, *key, *inner))


def set_sample_restore_key(sample: Any, *key, src: Any) -> Any:
    """Replace the sample's restore key with (wrapper class name, *key)."""
    if get_sample_restore_key(sample) is None and not hasattr(sample, "__restore_key__"):
        return sample
    return _put_key(sample, (type(src).__name__, *key))


#: functions energon-arrow implements outside its mirror of energon's modules, by energon's module of them
_ENERGON_HOMES = {
    "energon_arrow.samples.batch": (
        "megatron.energon.task_encoder.base",
        {"batch_list", "batch_stack", "batch_pad_stack", "generic_batch"},
    ),
}


def function_config(fn: Callable) -> str:
    """A function's name in a `config()` (energon's `SavableDataset._function_config`): `module.qualname`, where a
    function of energon's API surface that energon-arrow mirrors (`energon_arrow.energon.x` mirrors
    `megatron.energon.x`; the batch helpers) is named by energon's module, so that a config compares equal
    with one an energon job stored; a user's own function keeps its own name (docs/migration.md)."""
    mod = inspect.getmodule(fn)
    name = mod.__name__ if mod is not None else getattr(fn, "__module__", "<unknown>")
    qualname = getattr(fn, "__qualname__", getattr(fn, "__name__", "<unknown>"))
    if name == "energon_arrow.energon" or name.startswith("energon_arrow.energon."):
        name = "megatron.energon" + name[len("energon_arrow.energon") :]
    elif name in _ENERGON_HOMES and qualname in _ENERGON_HOMES[name][1]:
        name = _ENERGON_HOMES[name][0]
    return f"{name}.{qualname}"


def callable_config(value) -> dict:
    return value() if callable(value) else dict(value or {})


# ---- datasets ----------------------------------------------------------------------------------------------
class SavableDataset(torch.utils.data.IterableDataset[T_sample], ABC, Generic[T_sample]):
    """energon's SavableDataset: an iterable dataset whose per-worker state can be saved and restored.

    `_savable_fields` names the attributes saved by `save_state` (plain values are copied; `WorkerRng`,
    `SampleIndex` and nested savables save their own state)."""

    _savable_fields: tuple[str, ...] = ()

    def __init__(self, worker_config):
        self.worker_config = worker_config

    @abstractmethod
    def len_worker(self, worker_idx: int | None = None) -> int:
        """Samples of this (or the given) worker of the rank."""

    def len_rank(self) -> int:
        return sum(self.len_worker(i) for i in range(num_worker_slots(self.worker_config)))

    def __len__(self) -> int:
        return self.len_rank()

    @abstractmethod
    def reset_state_own(self) -> None: ...

    def reset_state_deep(self) -> None:
        self.reset_state_own()

    @abstractmethod
    def worker_has_samples(self) -> bool: ...

    def save_state(self) -> dict:
        state: dict[str, Any] = {STATE_CLASS: type(self).__name__}
        for key in self._savable_fields:
            value = getattr(self, key)
            state[key] = value.save_state() if hasattr(value, "save_state") else copy.deepcopy(value)
        return state

    def restore_state(self, state: dict) -> None:
        if state.get(STATE_CLASS) != type(self).__name__:
            raise ValueError(
                f"state of {state.get(STATE_CLASS)!r} cannot be restored into {type(self).__name__} "
                "(the pipeline differs from the one that saved it)"
            )
        for key in self._savable_fields:
            if key not in state:
                raise ValueError(f"{type(self).__name__} state lacks field {key!r}")
            current = getattr(self, key)
            if hasattr(current, "restore_state"):
                current.restore_state(state[key])
            else:
                setattr(self, key, copy.deepcopy(state[key]))

    def can_restore_sample(self) -> bool:
        return False

    def assert_can_restore(self) -> None:
        if not self.can_restore_sample():
            raise ValueError(f"{type(self).__name__} cannot restore samples by key")

    def restore_sample(self, restore_key: tuple) -> Any:
        raise ValueError(
            f"{type(self).__name__} cannot restore a sample from its key (not deterministic): {restore_key!r}"
        )

    @abstractmethod
    def config(self) -> dict: ...

    @staticmethod
    def _function_config(fn: Callable) -> str:
        return function_config(fn)


def as_savable(dataset: Any) -> Any:
    """`dataset` itself, or for a dataset of `get_train_dataset` / `get_val_dataset` (energon/energon_dataset.py)
    energon's savable pipeline with the same arguments, so energon's wrappers compose it."""
    if isinstance(dataset, SavableDataset) or not hasattr(dataset, "as_pipeline"):
        return dataset
    return dataset.as_pipeline()


class BaseWrapperDataset(SavableDataset[T_sample_out], ABC, Generic[T_sample_in, T_sample_out]):
    """A dataset wrapping one or more savable datasets; saves their states under "datasets"."""

    def __init__(self, datasets: SavableDataset | Iterable[SavableDataset], *, worker_config):
        super().__init__(worker_config)
        one = isinstance(datasets, (SavableDataset, torch.utils.data.Dataset))
        self.datasets = tuple(map(as_savable, (datasets,) if one else datasets))
        for d in self.datasets:
            if not isinstance(d, SavableDataset):
                raise TypeError(f"{type(self).__name__} wraps savable datasets, got {type(d).__name__}")
            if worker_config_dict(d.worker_config) != worker_config_dict(worker_config):
                raise ValueError(
                    f"{type(self).__name__}: the wrapped dataset's worker_config "
                    f"{worker_config_dict(d.worker_config)} differs from {worker_config_dict(worker_config)}"
                )

    @property
    def dataset(self) -> SavableDataset:
        if len(self.datasets) != 1:
            raise AttributeError(f"{type(self).__name__} wraps {len(self.datasets)} datasets")
        return self.datasets[0]

    def can_restore_sample(self) -> bool:
        return all(d.can_restore_sample() for d in self.datasets)

    def assert_can_restore(self) -> None:
        for d in self.datasets:
            d.assert_can_restore()

    def worker_has_samples(self) -> bool:
        return any(d.worker_has_samples() for d in self.datasets)

    def _find_wrapped_dataset(self, cls: type) -> SavableDataset | None:
        for d in self.datasets:
            if isinstance(d, cls):
                return d
            if isinstance(d, BaseWrapperDataset) and (found := d._find_wrapped_dataset(cls)) is not None:
                return found
        return None

    def restore_sample(self, restore_key: tuple) -> Any:
        if len(self.datasets) == 1:
            return self.datasets[0].restore_sample(restore_key)
        name, idx, *rest = restore_key
        if name != type(self).__name__:
            raise ValueError(f"restore key {restore_key!r} is not one of {type(self).__name__}")
        return add_sample_restore_key(self.datasets[idx].restore_sample(tuple(rest)), idx, src=self)

    def save_state(self) -> dict:
        return {**super().save_state(), "datasets": [d.save_state() for d in self.datasets]}

    def restore_state(self, state: dict) -> None:
        inner = state.get("datasets")
        if inner is None or len(inner) != len(self.datasets):
            raise ValueError(f"{type(self).__name__}: state holds a different number of inner datasets")
        for d, s in zip(self.datasets, inner):
            d.restore_state(s)
        super().restore_state(state)

    def reset_state_deep(self) -> None:
        for d in self.datasets:
            d.reset_state_deep()
        self.reset_state_own()
