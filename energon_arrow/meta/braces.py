"""Brace expressions as energon writes and reads them in split.yaml: `shard-{000..050}.tar`, `{a,b}`.

`expand_braces(text) -> list[str]` follows the bash-like rules of the `braceexpand` package energon uses:
comma alternatives, integer ranges `{a..b}` / `{a..b..step}` (zero padded to the widest bound when a bound has a
leading zero), character ranges `{a..e}`, nesting, and `\\{` escapes. A brace without a matching close or
without a comma/range inside stays literal.
"""

from __future__ import annotations

import itertools
import re

_INT_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)(?:\.\.(-?\d+))?$")
_CHAR_RANGE = re.compile(r"^([A-Za-z])\.\.([A-Za-z])(?:\.\.(-?\d+))?$")


def expand_braces(text: str) -> list[str]:
    """All strings a brace expression stands for, in order (no braces: `[text]`)."""
    return [_unescape(s) for s in _expand(text)]


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def _find_group(text: str) -> tuple[int, int, list[str]] | None:
    """First `{...}` group that expands: (start, end, items) with items split on top-level commas."""
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            depth = 0
            j = i
            items: list[str] = []
            last = i + 1
            while j < n:
                cj = text[j]
                if cj == "\\":
                    j += 2
                    continue
                if cj == "{":
                    depth += 1
                elif cj == "}":
                    depth -= 1
                    if depth == 0:
                        items.append(text[last:j])
                        if len(items) > 1 or _range_items(items[0]) is not None:
                            return i, j + 1, items
                        break
                elif cj == "," and depth == 1:
                    items.append(text[last:j])
                    last = j + 1
                j += 1
        i += 1
    return None


def _range_items(body: str) -> list[str] | None:
    m = _INT_RANGE.match(body)
    if m:
        lo_s, hi_s, step_s = m.groups()
        lo, hi = int(lo_s), int(hi_s)
        step = abs(int(step_s)) if step_s else 1
        step = step or 1
        width = 0
        if any(len(s.lstrip("-")) > 1 and s.lstrip("-").startswith("0") for s in (lo_s, hi_s)):
            width = max(len(lo_s), len(hi_s))
        values = range(lo, hi + 1, step) if lo <= hi else range(lo, hi - 1, -step)
        return [str(v).zfill(width) if width else str(v) for v in values]
    m = _CHAR_RANGE.match(body)
    if m:
        lo_c, hi_c, step_s = m.groups()
        step = abs(int(step_s)) if step_s else 1
        step = step or 1
        lo, hi = ord(lo_c), ord(hi_c)
        values = range(lo, hi + 1, step) if lo <= hi else range(lo, hi - 1, -step)
        return [chr(v) for v in values]
    return None


def _expand(text: str) -> list[str]:
    group = _find_group(text)
    if group is None:
        return [text]
    start, end, items = group
    prefix, suffix = text[:start], text[end:]
    if len(items) == 1:
        alternatives = _range_items(items[0]) or []
    else:
        alternatives = list(itertools.chain.from_iterable(_expand(item) for item in items))
    tails = _expand(suffix)
    return [prefix + alt + tail for alt in alternatives for tail in tails]


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
