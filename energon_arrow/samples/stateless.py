"""`@stateless`: marks a task-encoder step whose output depends only on its input, as energon does.

The loader (energon/hooks.py) reads the marks: with `restore_seeds=True` it seeds `random`, numpy and torch from
the loader seed and the sample's position before each call, so a restored run reproduces the same random
augmentations (energon seeds from its worker seed and sample index; our order does not depend on workers);
`failure_tolerance=N` lets up to N failures of the step be logged and the sample skipped before the next one is
raised (0 disables the tolerance; None uses the loader's default).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def stateless(
    fn: Callable | None = None, *, restore_seeds: bool = False, failure_tolerance: int | None = None
) -> Any:
    """Mark `fn` stateless; usable as `@stateless` or `@stateless(restore_seeds=..., failure_tolerance=...)`.

    Returns `fn` itself with the attributes `__stateless__`, `__restore_seeds__` and (when given)
    `__failure_tolerance__` set."""
    if fn is None:
        return lambda f: stateless(f, restore_seeds=restore_seeds, failure_tolerance=failure_tolerance)
    if failure_tolerance is not None and (not isinstance(failure_tolerance, int) or failure_tolerance < 0):
        raise ValueError(
            f"stateless: failure_tolerance must be an int >= 0 or None, got {failure_tolerance!r}"
        )
    fn.__stateless__ = True
    fn.__restore_seeds__ = restore_seeds
    if failure_tolerance is not None:
        fn.__failure_tolerance__ = failure_tolerance
    return fn


def get_stateless(fn: Callable) -> bool:
    """Whether `fn` is marked `@stateless`."""
    return getattr(fn, "__stateless__", False)


def get_failure_tolerance(fn: Callable, default_failure_tolerance: int | None = None) -> int:
    """The failure tolerance of `fn` (its `@stateless(failure_tolerance=...)`, else the default; 0 = none)."""
    return getattr(fn, "__failure_tolerance__", default_failure_tolerance) or 0
