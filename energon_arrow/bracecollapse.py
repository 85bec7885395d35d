"""energon's `bracecollapse` helper: `collapse(strings, keep_order=False)` shortens names that differ only in
one number into `{lo..hi}` brace expressions (the inverse of brace expansion). `keep_order=True` keeps the input
order (only runs of consecutive names are collapsed); `keep_order=False` first sorts the names naturally
(numbers by value) so that more of them fall into runs. Built on `energon_arrow.meta.braces.collapse_names`."""

from __future__ import annotations

import re

from energon_arrow.meta.braces import collapse_names

__all__ = ["collapse"]


def _natural_key(name: str) -> list[tuple]:
    return [(0, int(t), len(t)) if t.isdigit() else (1, t, 0) for t in re.split(r"(\d+)", name)]


def collapse(strings: list[str], keep_order: bool = False) -> list[str]:
    """Brace expressions (and single names) whose expansion is exactly `strings` (as a set when not
    `keep_order`, in order when `keep_order`)."""
    names = list(strings)
    return collapse_names(names if keep_order else sorted(names, key=_natural_key))
