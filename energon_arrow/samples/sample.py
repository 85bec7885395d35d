"""`Sample`, the base of every sample type, and `edataclass`, with energon 7.4.1's names and semantics.

All sample and batch classes are `@dataclass(kw_only=True, slots=True)` like energon's: fields are passed by
name (extra attributes are still allowed, as in energon).
"""

from __future__ import annotations

import dataclasses
import typing
from abc import ABC
from typing import Any, ClassVar, NamedTuple, TypeVar

import torch
from typing_extensions import dataclass_transform  # a torch dependency; typing has it from 3.11

T = TypeVar("T")


@dataclass_transform(kw_only_default=True)
def edataclass(cls: type[T]) -> type[T]:
    """`@dataclass(kw_only=True, slots=True)`: the dataclass flavour energon uses for samples and batches."""
    return dataclasses.dataclass(kw_only=True, slots=True)(cls)


class SourceInfo(NamedTuple):
    """Where (part of) a sample was read from: the dataset's root, the sample's index or the file's key, the
    shard (or folder) and the names of the files used. Samples collect these in `__sources__`.

    energon's fields, immutable and hashable like energon's frozen dataclass; a named tuple because one is made
    for every loaded sample and a named tuple is made in a third of the time."""

    dataset_path: Any
    index: str | int
    shard_name: str
    file_names: tuple[str, ...]

    def __reduce__(self):
        # the class and the fields: a DataLoader worker pickles one per sample, and this pickles in half the time
        # of a named tuple's default reduction (copyreg's __newobj__ with __getnewargs__)
        return (SourceInfo, tuple(self))


def _pin(value: Any, device: Any) -> Any:
    """`value` with every tensor inside (dicts, dataclasses, named tuples, lists, tuples) in pinned memory."""
    if isinstance(value, torch.Tensor):
        return value.pin_memory(device)
    if isinstance(value, dict):
        return {k: _pin(v, device) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return type(value)(
            **{f.name: _pin(getattr(value, f.name), device) for f in dataclasses.fields(value)}
        )
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_pin(v, device) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_pin(v, device) for v in value)
    return value


class PinMemoryMixin:
    """`pin_memory()`: a copy whose tensors are in pinned memory (what torch's DataLoader calls per batch).

    Without `__slots__` (like energon's), so samples and batches may carry extra attributes."""

    def _pin_memory(self, batch: Any, device: Any = None) -> Any:
        return _pin(batch, device)

    def pin_memory(self):
        return _pin(self, None)


def _is_classvar(tp: Any) -> bool:
    return tp is ClassVar or typing.get_origin(tp) is ClassVar


class ExtendableDataclassMixin:
    """`Cls.extend(src, **new_fields)`: an instance of a subclass built from an instance of its base class."""

    @classmethod
    def extend(cls, src: Any, **kwargs: Any) -> Any:
        if not dataclasses.is_dataclass(cls):
            raise TypeError(f"{cls.__name__}.extend: {cls.__name__} is not a dataclass")
        if not issubclass(cls, type(src)):
            raise TypeError(
                f"{cls.__name__}.extend: {type(src).__name__} is not a base class of {cls.__name__}"
            )
        for f in dataclasses.fields(src):
            if f.init and not _is_classvar(f.type) and f.name not in kwargs:
                kwargs[f.name] = getattr(src, f.name)
        return cls(**kwargs)


@edataclass
class Sample(ABC, PinMemoryMixin, ExtendableDataclassMixin):
    """Base of every sample type.

    `__key__`: the sample's key in its dataset; `__restore_key__`: a (nested) tuple of strings and ints that
    finds the sample again (set by the loader); `__subflavors__`: the dataset's subflavors; `__sources__`:
    where the sample's data was read from.
    """

    __key__: str
    __restore_key__: tuple
    __subflavors__: dict[str, Any] | None = None
    __sources__: tuple[SourceInfo, ...] | None = None

    @classmethod
    def derive_from(cls, base_sample: Sample, **kwargs: Any) -> Any:
        """A new `cls` sample with the given fields and the metadata fields (key, restore key, subflavors,
        sources) of `base_sample` (a metadata field given in `kwargs` wins)."""
        meta = {name: getattr(base_sample, name) for name in META_FIELDS if name not in kwargs}
        return cls(**meta, **kwargs)

    @classmethod
    def from_joined(cls, *args: Sample | None, **kwargs: Sample | None) -> Any:
        """A sample joined from samples of joined datasets (the first is the primary, None entries are absent).

        The metadata comes from the primary; the sources are the primary's followed by those of every joined
        sample (the primary's included, as energon does); each other field takes the value of the last sample
        that has it.
        """
        if kwargs:
            raise TypeError(
                f"{cls.__name__}.from_joined: pass the joined samples positionally; the default join ignores names "
                f"(got {sorted(kwargs)}); override from_joined to join by name"
            )
        if not args:
            return cls()
        primary = args[0]
        if primary is None:
            raise ValueError(f"{cls.__name__}.from_joined: the primary (first) sample must not be None")
        values = {f.name: getattr(primary, f.name) for f in dataclasses.fields(primary)}
        joined = [s for s in args if s is not None]
        values["__sources__"] = (
            *(primary.__sources__ or ()),
            *(src for s in joined for src in (s.__sources__ or ())),
        )
        for s in joined:
            for f in dataclasses.fields(s):
                if f.name not in META_FIELDS:
                    values[f.name] = getattr(s, f.name)
        return cls(**values)


META_FIELDS = tuple(f.name for f in dataclasses.fields(Sample))
