"""Cookers: turn crude samples (dicts of part -> payload) into typed samples, with energon's names.

A `Cooker` applies to the crude samples whose subflavors contain its `has_subflavors`. The loader passes the
cook function the crude sample and, by keyword, the aux data sources its signature names; `@cooker(need_primary=
True)` (or a `primary` parameter) adds the primary dataset's own file store as `primary`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from energon_arrow.samples.sample import META_FIELDS


def cooker(fn: Callable | None = None, *, need_cache: bool = False, need_primary: bool = False) -> Any:
    """Mark a cook function; usable as `@cooker` or `@cooker(need_primary=True)`.

    `need_primary=True`: the cook function receives the primary dataset's file store as `primary=`.
    `need_cache=True`: the cook function receives the loader's cache pool as `cache=` (get_loader /
    get_savable_loader(cache_pool=...); without one the loader raises an error saying so).
    """
    if fn is None:
        return functools.partial(cooker, need_cache=need_cache, need_primary=need_primary)

    @functools.wraps(fn)
    def cook(*args, **kwargs):
        return fn(*args, **kwargs)

    cook.__cooker_need_cache__ = need_cache
    cook.__cooker_need_primary__ = need_primary
    return cook


def get_cooker_need_cache(fn: Callable) -> bool:
    """Whether a cook function asked for the cache pool (`@cooker(need_cache=True)`)."""
    return getattr(fn, "__cooker_need_cache__", False)


def get_cooker_need_primary(fn: Callable) -> bool:
    """Whether a cook function asked for the primary dataset (`@cooker(need_primary=True)`)."""
    return getattr(fn, "__cooker_need_primary__", False)


T_sample = TypeVar("T_sample")


@dataclass
class Cooker(Generic[T_sample]):
    """A cook function (crude sample -> sample) and the subflavors a crude sample must have to be cooked by it
    (all given keys present with equal values; None matches every sample). Generic like energon's:
    `Cooker[TextSample](fn)`."""

    cook: Callable[..., T_sample]
    has_subflavors: dict | None = None

    @property
    def need_primary(self) -> bool:
        return get_cooker_need_primary(self.cook)

    @property
    def need_cache(self) -> bool:
        return get_cooker_need_cache(self.cook)

    def is_match(self, subflavors: dict | None) -> bool:
        if self.has_subflavors is None:
            return True
        subflavors = subflavors or {}
        return all(k in subflavors and subflavors[k] == v for k, v in self.has_subflavors.items())


@functools.lru_cache(maxsize=256)
def cook_keywords(cook) -> tuple[bool, frozenset]:
    """(whether `cook` takes **kwargs, its parameter names): read once per cook function, not per sample."""
    params = inspect.signature(cook).parameters
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()), frozenset(params)


def select_cooker(cookers, subflavors: dict | None, where: str) -> Cooker:
    """The first cooker matching `subflavors`; a LoaderError naming `where` when none does."""
    from energon_arrow.loader.errors import LoaderError

    for c in cookers:
        if c.is_match(subflavors):
            return c
    raise LoaderError(f"{where}: no cooker matches subflavors {subflavors!r} (cookers: {list(cookers)})")


def basic_sample_keys(crude_sample: dict, additional_source_info: tuple = ()) -> dict:
    """The metadata entries (`__key__`, `__restore_key__`, `__subflavors__`, `__sources__`) a crude sample has,
    to pass on to the cooked sample: `Sample(**basic_sample_keys(crude), ...)`. `additional_source_info` is
    appended to the crude sample's sources."""
    keys = {name: crude_sample[name] for name in META_FIELDS if name in crude_sample}
    if additional_source_info:
        keys["__sources__"] = (*(crude_sample.get("__sources__") or ()), *additional_source_info)
    return keys
