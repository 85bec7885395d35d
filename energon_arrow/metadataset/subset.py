"""energon 7.4's metadataset `subset: {range: [start, end]}` as pure arithmetic.

A range is either absolute (`[100, 200]`, `[100, end]`: sample indices, allowed on a leaf dataset reference only)
or relative (`["25%", "75%"]`, allowed at every level). Levels compose like energon's `Subset.merge`: a relative
parent range applies inside the child's relative range; an absolute leaf range is kept next to the relative one
and applied first (`Subset.bounds`: absolute range on the split's samples, then the relative range on what is
left, rounding down as energon does).
"""

from __future__ import annotations

from dataclasses import dataclass

from energon_arrow.loader.errors import LoaderError


@dataclass(frozen=True)
class Subset:
    range: tuple[float, float] = (0.0, 1.0)
    absolute: tuple[int, int | None] | None = None

    def bounds(self, n: int, where: str) -> tuple[int, int]:
        """Absolute [start, end) rows of this subset of a split with n samples."""
        start, end = 0, n
        if self.absolute is not None:
            start, end = self.absolute[0], n if self.absolute[1] is None else self.absolute[1]
            if not 0 <= start <= end <= n:
                raise LoaderError(
                    f"{where}: subset range [{self.absolute[0]}, {self.absolute[1] if self.absolute[1] is not None else 'end'}]"
                    f" is outside the split's {n} samples"
                )
        total = end - start
        start, end = start + int(total * self.range[0]), start + int(total * self.range[1])
        return start, end

    def energon_config(self) -> dict:
        """energon's `DatasetSubset.config()` of this subset: an absolute range keeps energon's integer whole
        relative range (0, 1) until a parent's relative range is merged into it."""
        whole = self.absolute is not None and self.range == (0.0, 1.0)
        return {
            "range": (0, 1) if whole else tuple(self.range),
            "absolute_range": None if self.absolute is None else tuple(self.absolute),
        }


def _bound(value, where: str) -> int | float | None:
    if isinstance(value, bool):
        raise LoaderError(f"{where}: subset bound {value!r} must be an integer, 'end' or a percentage")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        text = value.strip()
        if text == "end":
            return None
        if text.endswith("%"):
            try:
                pct = float(text[:-1])
            except ValueError:
                pct = -1.0
            if 0 <= pct <= 100:
                return pct / 100.0
    raise LoaderError(
        f"{where}: subset bound {value!r} must be an integer, 'end' or a percentage '0%'..'100%'"
    )


def parse_subset(raw, where: str) -> Subset | None:
    """One level's `subset:` mapping (None when absent)."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) != {"range"}:
        raise LoaderError(f"{where}: subset must be {{range: [start, end]}}, got {raw!r}")
    rng = raw["range"]
    if not isinstance(rng, (list, tuple)) or len(rng) != 2:
        raise LoaderError(f"{where}: subset range must be [start, end], got {rng!r}")
    start, end = _bound(rng[0], where), _bound(rng[1], where)
    if isinstance(start, int):
        if not (isinstance(end, int) or end is None):
            raise LoaderError(
                f"{where}: an absolute subset start needs an absolute end or 'end', got {rng!r}"
            )
        if start < 0 or (end is not None and end < start):
            raise LoaderError(f"{where}: bad absolute subset range {rng!r}")
        return Subset(absolute=(start, end))
    if start is None or isinstance(end, int):
        raise LoaderError(f"{where}: a relative subset needs percentages (end may be 'end'), got {rng!r}")
    end = 1.0 if end is None else end
    if start > end:
        raise LoaderError(f"{where}: subset start {rng[0]!r} is after its end {rng[1]!r}")
    return Subset(range=(start, end))


def merge_subset(own: Subset | None, parent: Subset | None, where: str) -> Subset | None:
    """The subset in effect at one level: its own range composed with the one inherited from above."""
    if parent is not None and parent.absolute is not None:
        raise LoaderError(
            f"{where}: absolute subset ranges are only allowed for a leaf dataset reference (not on a blend or nested metadataset)"
        )
    if own is None or parent is None:
        return own if own is not None else parent
    total = own.range[1] - own.range[0]
    return Subset(
        range=(own.range[0] + parent.range[0] * total, own.range[0] + parent.range[1] * total),
        absolute=own.absolute,
    )
