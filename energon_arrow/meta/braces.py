"""Brace expressions as energon writes and reads them in split.yaml: `shard-{000..050}.tar`, `{a,b}`.

`expand_braces(text, where=None) -> list[str]` is the `braceexpand` package's expansion, the one energon applies to
split.yaml entries, exclude entries and `--split-parts` patterns (comma alternatives, integer ranges with steps and
zero padding, character ranges, nesting, backslash escapes, unbalanced braces refused), with a MetaError that names
the pattern (and `where` it came from); `check_braces(text, where)` only checks. `collapse_names(names)` writes consecutive shard names as `{lo..hi}` ranges.
"""

from __future__ import annotations

import re

from braceexpand import UnbalancedBracesError, braceexpand

from energon_arrow.meta.errors import MetaError

_SPECIAL = re.compile(r"[{}\\]")


_ONE_RANGE = re.compile(r"([^{}\\,]*)\{(\d+)\.\.(\d+)\}([^{}\\,]*)")


def expand_braces(text: str, where: str | None = None) -> list[str]:
    """All strings a brace expression stands for, in braceexpand's order (nothing special in it: `[text]`)."""
    if _SPECIAL.search(text) is None:  # fast path: split.yaml may hold many plain entries
        return [text]
    one = _ONE_RANGE.fullmatch(text)
    if one is not None:  # fast path: one integer range, as prepare writes a split's shard list
        return _int_range(*one.groups())
    return list(_expansions(text, where))


def _int_range(prefix: str, lo: str, hi: str, suffix: str) -> list[str]:
    """`prefix{lo..hi}suffix` exactly as braceexpand expands it (zero padding to the wider bound when a bound
    has a leading zero; descending when lo > hi)."""
    pad = max(len(lo), len(hi)) if any(b.startswith("0") for b in (lo, hi) if b != "0") else 0
    a, b = int(lo), int(hi)
    numbers = range(a, b + 1) if a < b else range(a, b - 1, -1)
    fmt = prefix.replace("%", "%%") + f"%0{pad}d" + suffix.replace("%", "%%")
    return [fmt % i for i in numbers]


def _any_special(entries: list[str]) -> bool:
    joined = "".join(entries)  # three memchr-speed scans instead of a regex over every entry
    return "{" in joined or "}" in joined or "\\" in joined


def expand_all(entries: list[str], where: str | None = None) -> list[str]:
    """`expand_braces` of every entry, concatenated; one scan of all entries when none has a brace (split.yaml
    files may hold a million exclude entries)."""
    if not _any_special(entries):
        return list(entries)
    return [s for e in entries for s in expand_braces(e, where)]


def check_all(entries: list[str], where: str | None = None) -> None:
    """`check_braces` of every entry (one scan when none has a brace)."""
    if _any_special(entries):
        for e in entries:
            check_braces(e, where)


def check_braces(text: str, where: str | None = None) -> None:
    """Raise the MetaError of `expand_braces` for a pattern braceexpand refuses, without expanding it."""
    if _SPECIAL.search(text) is not None:
        _expansions(text, where)


def _expansions(text: str, where: str | None):
    try:
        return braceexpand(text)  # parses (and refuses unbalanced braces) now, expands lazily
    except UnbalancedBracesError:
        raise MetaError(
            f"{where + ': ' if where else ''}unbalanced braces in {text!r} "
            "(write a literal brace as \\{ or \\})"
        ) from None


def collapse_names(names: list[str]) -> list[str]:
    """Shorten consecutive names that differ only in one zero-padded number into `{lo..hi}` expressions.

    Order is kept and `expand_braces` of the result gives back `names` exactly. When any name contains a
    brace, comma or backslash the names are returned unchanged.
    """
    if any(re.search(r"[\\{},]", n) for n in names):
        return list(names)
    out: list[str] = []
    run: list[tuple[str, str, str]] = []  # (prefix, digits, suffix) of the current run

    def flush():
        if not run:
            return
        if len(run) == 1:
            out.append(run[0][0] + run[0][1] + run[0][2])
        else:
            p, lo, s = run[0]
            out.append(f"{p}{{{lo}..{run[-1][1]}}}{s}")
        run.clear()

    for name in names:
        m = re.match(r"^(.*?)(\d+)(\D*)$", name)
        if m is None:
            flush()
            out.append(name)
            continue
        prefix, digits, suffix = m.groups()
        if run:
            p, d, s = run[-1]
            if (
                p == prefix
                and s == suffix
                and len(d) == len(digits)
                and int(digits) == int(d) + 1
                and _pads_like(run[0][1], digits)
            ):
                run.append((prefix, digits, suffix))
                continue
            flush()
        run.append((prefix, digits, suffix))
    flush()
    return out


def _pads_like(lo: str, hi: str) -> bool:
    """True when `{lo..hi}` expands back to the same digit widths (zero padding applies to every item)."""
    padded = any(len(x) > 1 and x.startswith("0") for x in (lo, hi))
    if padded:
        return True
    return len(str(int(lo))) == len(lo) and len(str(int(hi))) == len(hi) and len(lo) == len(hi)
