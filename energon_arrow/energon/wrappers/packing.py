"""energon's `PackingDataset` wrapper for custom pipelines: consecutive windows of `buffer_size` samples go to
`pre_packer(samples) -> [[sample, ...], ...]` (samples not selected are dropped, as in energon; the last window
of a finite pass may be smaller), each selected group gets `sample_encoder` on each sample (when given) and then
`final_packer(group) -> pack`.

State: the partial window and the groups of the current window not yet packed, each as the restore keys of their
samples (re-read on restore by the wrapped dataset's `restore_sample`, like the batch buffers), plus the pack
counter. A pack's restore key is (PackingDataset, pack index, *sample keys); restoring re-reads the samples and
re-encodes / re-packs them, seeded by the pack index, so it needs stateless `sample_encoder` / `final_packer`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any, Generic

from energon_arrow.energon.wrappers.base import (
    BaseWrapperDataset,
    SampleIndex,
    T_batch_sample,
    T_encoded_sample,
    T_sample,
    call_seeded,
    callable_config,
    function_config,
    set_sample_restore_key,
    worker_config_dict,
)
from energon_arrow.energon.wrappers.batch import SampleBuffer
from energon_arrow.energon.wrappers.failures import ErrorContext, restore_guarded


class PackingDataset(
    BaseWrapperDataset[T_sample, T_batch_sample], Generic[T_sample, T_encoded_sample, T_batch_sample]
):
    """Sample packing over a savable dataset (energon's PackingDataset, same constructor)."""

    _savable_fields = ("_reading_buffer", "_pending_groups", "_pre_packing_index", "_pack_index")

    def __init__(
        self,
        dataset,
        buffer_size: int,
        pre_packer: Callable[[list], list],
        final_packer: Callable[[list], Any],
        *,
        final_packer_stateless: bool = False,
        sample_encoder: Callable[[Any], Any] | None = None,
        sample_encoder_stateless: bool = False,
        packer_config=None,
        pre_packer_failure_tolerance: int = 100,
        final_packer_failure_tolerance: int = 100,
        sample_encoder_failure_tolerance: int = 100,
        worker_config,
    ):
        super().__init__(dataset, worker_config=worker_config)
        if buffer_size < 1:
            raise ValueError(f"PackingDataset: buffer_size must be >= 1, got {buffer_size}")
        for name, fn in (("pre_packer", pre_packer), ("final_packer", final_packer)):
            if inspect.isgeneratorfunction(fn):
                raise ValueError(f"PackingDataset: {name} {fn} must return its result, not be a generator")
        self.buffer_size = buffer_size
        self.pre_packer, self.final_packer = pre_packer, final_packer
        self.final_packer_stateless = final_packer_stateless
        self.sample_encoder = sample_encoder
        self.sample_encoder_stateless = True if sample_encoder is None else sample_encoder_stateless
        self.packer_config = packer_config
        self._pre_failures = ErrorContext(
            f"PackingDataset.{pre_packer}", worker_config, pre_packer_failure_tolerance
        )
        self._final_failures = ErrorContext(
            f"PackingDataset.{final_packer}", worker_config, final_packer_failure_tolerance
        )
        self._encode_failures = ErrorContext(
            f"PackingDataset.{sample_encoder}", worker_config, sample_encoder_failure_tolerance
        )
        self.reset_state_own()

    def reset_state_own(self) -> None:
        self._reading_buffer = SampleBuffer(self.dataset)
        self._pending_groups = _Groups()
        self._pre_packing_index = SampleIndex()
        self._pack_index = SampleIndex()

    def len_worker(self, worker_idx: int | None = None) -> int:
        return self.dataset.len_worker(worker_idx)  # energon: the unpacked count (packs are not known ahead)

    def _select(self) -> None:
        samples, keys = self._reading_buffer.flush()
        key_of = {id(s): k for s, k in zip(samples, keys)}
        with self._pre_failures.handle_errors(samples):
            idx = self._pre_packing_index.get_next()
            groups = [
                list(g) for g in call_seeded(self.pre_packer, self.worker_config, idx, samples) if len(g)
            ]
            if any(id(s) not in key_of for g in groups for s in g):
                raise ValueError(
                    f"PackingDataset: pre_packer {self.pre_packer} returned a sample that is not one of the "
                    "buffer's samples; it must select (not copy or change) the samples it is given"
                )
            self._pending_groups.set(groups, [[key_of[id(s)] for s in g] for g in groups])

    def _pack(self, samples: list, keys: list, pack_idx: int) -> Any:
        """The pack of a group; a sample whose encoding fails (or is skipped) leaves the group, as in energon."""
        if self.sample_encoder is not None:
            encoded = []
            for sample in samples:
                with self._encode_failures.handle_errors(sample):
                    encoded.append(call_seeded(self.sample_encoder, self.worker_config, pack_idx, sample))
            samples = encoded
        if not samples:
            return None
        pack = call_seeded(self.final_packer, self.worker_config, pack_idx, samples)
        return set_sample_restore_key(pack, pack_idx, *keys, src=self)

    def _drain(self) -> Iterator[Any]:
        while len(self._pending_groups):
            samples, keys = self._pending_groups.pop()
            pack_idx = self._pack_index.get_next()
            with self._final_failures.handle_errors(samples):
                pack = self._pack(samples, keys, pack_idx)
                if pack is not None:
                    yield pack

    def __iter__(self) -> Iterator[Any]:
        self._reading_buffer.start()
        self._pending_groups.start(self.dataset)
        yield from self._drain()
        for sample in self.dataset:
            self._reading_buffer.append(sample)
            if len(self._reading_buffer) >= self.buffer_size:
                self._select()
                yield from self._drain()
        if len(self._reading_buffer):
            self._select()
            yield from self._drain()

    def can_restore_sample(self) -> bool:
        return super().can_restore_sample() and self.final_packer_stateless and self.sample_encoder_stateless

    def assert_can_restore(self) -> None:
        if not (self.final_packer_stateless and self.sample_encoder_stateless):
            raise ValueError(
                "PackingDataset: final_packer and sample_encoder must be stateless to restore packs"
            )
        super().assert_can_restore()

    def restore_sample(self, restore_key: tuple) -> Any:
        self.assert_can_restore()
        _, pack_idx, *keys = restore_key
        samples = [self.dataset.restore_sample(k) for k in keys]
        return restore_guarded(self.worker_config, samples, lambda: self._pack(samples, keys, pack_idx))

    def config(self) -> dict:
        cfg = {
            "type": type(self).__qualname__,
            "buffer_size": self.buffer_size,
            "pre_packer": function_config(self.pre_packer),
            "final_packer": function_config(self.final_packer),
            "final_packer_stateless": self.final_packer_stateless,
            "worker_config": worker_config_dict(self.worker_config),
            "dataset": self.dataset.config(),
        }
        if self.sample_encoder is not None:
            cfg["sample_encoder"] = function_config(self.sample_encoder)
            cfg["sample_encoder_stateless"] = self.sample_encoder_stateless
        if self.packer_config:
            cfg["packer_config"] = callable_config(self.packer_config)
        return cfg


class _Groups:
    """The selected groups of a window not yet packed, savable as their samples' restore keys."""

    def __init__(self):
        self.samples: list[list] = []
        self.keys: list[list] = []
        self._pending = False

    def set(self, samples: list[list], keys: list[list]) -> None:
        self.samples, self.keys = samples, keys

    def start(self, dataset) -> None:
        if self._pending:
            self._pending = False
            self.samples = [[dataset.restore_sample(k) for k in group] for group in self.keys]

    def pop(self) -> tuple[list, list]:
        return self.samples.pop(0), self.keys.pop(0)

    def __len__(self) -> int:
        return len(self.keys)

    def save_state(self) -> dict:
        return {"groups": [list(g) for g in self.keys]}

    def restore_state(self, state: dict | None) -> None:
        self.keys = [list(g) for g in (state or {}).get("groups") or []]
        self.samples = []
        self._pending = bool(self.keys)
