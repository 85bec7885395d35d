"""Batching with energon 7.4.1's rules: `Batch`, `generic_batch` and the per-field batchers, batch concatenation.

One implementation serves the loader's default batching (`batch_samples`, also used column-wise by the fast
path), energon's `generic_batch` and `Batch.from_samples`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from energon_arrow.samples.sample import META_FIELDS, ExtendableDataclassMixin, PinMemoryMixin, edataclass


def batch_list(batch: list) -> list:
    """The values as they are, in a list."""
    return batch


def batch_stack(batch: list) -> torch.Tensor:
    """Equal-shaped tensors stacked along a new first dimension."""
    return torch.stack(batch, dim=0)


def batch_pad_stack(batch: list) -> torch.Tensor:
    """Tensors zero-padded to the largest size in every dimension, then stacked."""
    first = batch[0]
    if all(t.shape == first.shape for t in batch):
        return torch.stack(batch)
    sizes = [max(t.shape[d] for t in batch) for d in range(first.ndim)]
    out = first.new_zeros((len(batch), *sizes))
    for i, t in enumerate(batch):
        out[(i, *(slice(0, s) for s in t.shape))] = t
    return out


def _is_namedtuple(value: Any) -> bool:
    return isinstance(value, tuple) and hasattr(value, "_fields")


def _is_instance_dataclass(value: Any) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def generic_batch(batch: list) -> Any:
    """energon's default batcher of one list of values: tensors are padded and stacked; dicts, dataclasses and
    named tuples are batched field by field (a dataclass with `from_samples`, e.g. a `Batch`, batches itself);
    anything else stays a list."""
    first = batch[0]
    if isinstance(first, torch.Tensor):
        return batch_pad_stack(batch)
    if isinstance(first, dict):
        return {k: generic_batch([v[k] for v in batch]) for k in first}
    if _is_instance_dataclass(first):
        if hasattr(first, "from_samples"):
            return first.from_samples(batch)
        return type(first)(
            **{f.name: generic_batch([getattr(v, f.name) for v in batch]) for f in dataclasses.fields(first)}
        )
    if _is_namedtuple(first):
        return type(first)(**{f: generic_batch([getattr(v, f) for v in batch]) for f in first._fields})
    return batch_list(batch)


def batch_samples(samples: list) -> Any:
    """The loader's default batch, as energon's DefaultTaskEncoder.batch makes it: an instance of the samples'
    own class (or a dict of the same kind) whose fields are batched with `generic_batch` (so `__key__`,
    `__subflavors__` and `__sources__` are per-sample lists), except `__restore_key__`: the tuple of the samples'
    restore keys (energon's batch restore key is a tuple too)."""
    first = samples[0]
    if isinstance(first, dict):
        return type(first)({k: _batch_field(k, [s[k] for s in samples]) for k in first})
    if _is_instance_dataclass(first):
        return type(first)(
            **{
                f.name: _batch_field(f.name, [getattr(s, f.name) for s in samples])
                for f in dataclasses.fields(first)
            }
        )
    return generic_batch(samples)


def _batch_field(name: str, values: list) -> Any:
    if name == "__restore_key__":
        return tuple(values)
    if name in ("__subflavors__", "__sources__"):
        return values  # energon keeps these per sample, even when they are dicts
    return generic_batch(values)


@edataclass
class Batch(PinMemoryMixin, ExtendableDataclassMixin):
    """Base of batch dataclasses: the samples' keys, restore key, subflavors and sources, plus your fields."""

    __key__: list[str]
    __restore_key__: tuple
    __subflavors__: list[dict[str, Any] | None] | None = None
    __sources__: tuple | None = None

    @classmethod
    def derive_from(cls, base_batch: Batch, **kwargs: Any) -> Any:
        """A new `cls` batch with the given fields and the metadata fields of `base_batch`."""
        meta = {name: getattr(base_batch, name) for name in META_FIELDS}
        return cls(**meta, **kwargs)

    @classmethod
    def from_samples(cls, samples: Sequence[Any], **kwargs: Any) -> Any:
        """A batch of `samples` (dataclasses), as energon 7.4.1 builds it: each field of `cls` is the list of the
        samples' values (tensors are not stacked: energon 7.4.1 checks the sample, not the value, for being a
        tensor); `__sources__` is the sources of all samples in one tuple and `__subflavors__` the list of the
        samples' non-empty subflavors (both left at their default when no sample has any); `kwargs` override
        fields."""
        for s in samples:
            if not _is_instance_dataclass(s):
                raise TypeError(
                    f"{cls.__name__}.from_samples: samples must be dataclasses, got {type(s).__name__}"
                )
        init = {}
        for f in dataclasses.fields(cls):
            if f.name in kwargs:
                init[f.name] = kwargs[f.name]
            elif f.name == "__sources__":
                if any(s.__sources__ is not None for s in samples):
                    init[f.name] = tuple(src for s in samples if s.__sources__ for src in s.__sources__)
            elif f.name == "__subflavors__":
                if any(s.__subflavors__ is not None for s in samples):
                    init[f.name] = [s.__subflavors__ for s in samples if s.__subflavors__]
            else:
                init[f.name] = [getattr(s, f.name) for s in samples]
        return cls(**init)


def concat_pad(batch: list) -> torch.Tensor:
    """Batched tensors concatenated along the first dimension, the other dimensions zero-padded to the largest."""
    first = batch[0]
    sizes = [max(t.shape[d] for t in batch) for d in range(1, first.ndim)]
    out = first.new_zeros((sum(t.shape[0] for t in batch), *sizes))
    start = 0
    for t in batch:
        out[(slice(start, start + t.shape[0]), *(slice(0, s) for s in t.shape[1:]))] = t
        start += t.shape[0]
    return out


def generic_concat(batch: list) -> Any:
    """energon's default concatenation of batches: tensors with `concat_pad`; dicts, dataclasses and named tuples
    field by field; anything else stays a list of the batches' values."""
    first = batch[0]
    if isinstance(first, torch.Tensor):
        return concat_pad(batch)
    if isinstance(first, dict):
        return {k: generic_concat([v[k] for v in batch]) for k in first}
    if _is_instance_dataclass(first):
        return type(first)(
            **{f.name: generic_concat([getattr(v, f.name) for v in batch]) for f in dataclasses.fields(first)}
        )
    if _is_namedtuple(first):
        return type(first)(**{f: generic_concat([getattr(v, f) for v in batch]) for f in first._fields})
    return batch


def homogeneous_concat_mix(samples: list) -> Any:
    """Batches of one type concatenated with `generic_concat` (energon's default mix of MixBatchDataset)."""
    kinds = {type(s) for s in samples}
    if len(kinds) > 1:
        names = sorted(k.__qualname__ for k in kinds)
        raise TypeError(f"homogeneous_concat_mix: the batches must be of one type, got {names}")
    return generic_concat(samples)
