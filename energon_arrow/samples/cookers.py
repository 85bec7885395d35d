"""Cookers (crude part dicts -> samples, selected by subflavors) and the `stateless` marker, with energon's names."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class Cooker:
    """Turns a crude sample (dict of part -> payload plus `__key__`, `__subflavors__`...) into a sample.

    `has_subflavors`: the cooker applies only to samples whose subflavors contain all these key/value pairs.
    A cook function whose signature has keyword-only parameters named like aux sources receives those sources
    (random access by file name); `primary` receives the primary dataset's own store.
    """

    cook: Callable[..., Any]
    has_subflavors: dict | None = None

    def is_match(self, subflavors: dict | None) -> bool:
        if not self.has_subflavors:
            return True
        subflavors = subflavors or {}
        return all(k in subflavors and subflavors[k] == v for k, v in self.has_subflavors.items())


def select_cooker(cookers, subflavors: dict | None, where: str) -> Cooker:
    from energon_arrow.loader.errors import LoaderError

    for cooker in cookers:
        if cooker.is_match(subflavors):
            return cooker
    raise LoaderError(f"{where}: no cooker matches subflavors {subflavors!r} (cookers: {list(cookers)})")


def stateless(
    fn: Callable | None = None, *, restore_seeds: bool = False, failure_tolerance: int | None = None
):
    """Marks a task-encoder method as stateless (its output depends only on its input).

    `restore_seeds=True`: the loader seeds `random`, numpy and torch from (loader seed, sample position) before
    each call, so a restored run reproduces the same random augmentations. `failure_tolerance=N`: up to N
    exceptions of this function are logged and the sample skipped; the N+1st is raised (0 = never tolerate).
    """

    def wrap(f: Callable) -> Callable:
        @functools.wraps(f)
        def inner(*args, **kwargs):
            return f(*args, **kwargs)

        inner.__stateless__ = True
        inner.__restore_seeds__ = restore_seeds
        inner.__failure_tolerance__ = failure_tolerance
        return inner

    return wrap(fn) if fn is not None else wrap
