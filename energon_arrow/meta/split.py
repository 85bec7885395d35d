"""`.nv-meta/split.yaml` and energon's rules for assigning whole shards to splits.

Data:
- `SplitConfig(split_parts: dict[name, list[shard]], exclude: list[str])` holds entries as written (brace
  expressions allowed). `expanded()` returns a copy with every entry brace-expanded; `shards(part)` gives the
  expanded shard list of one part minus excluded shards (energon's iteration order); `excluded_shards(shards)`
  and `excluded_samples(shards) -> {shard: {key}}` split `exclude` into whole shards and
  `"<shard>/<sample key>"` entries (pass the dataset's shard list to resolve shard paths containing `/`).
- `parse_split(text, where)`, `read_split(storage, name="split.yaml")` (falls back to `split.json` like energon),
  `split_yaml_bytes(config, collapse=True)` (energon's layout: `split_parts:` then `exclude:`; shard lists
  brace-collapsed when `collapse`).

Pure split arithmetic (energon 7.4.1 semantics):
- `parse_split_ratio("8,1,1") -> [("train", 8.0), ("val", 1.0), ("test", 1.0)]`
- `ratio_split(shards, ratios, shuffle_seed=None)`: normalise ratios, optionally shuffle with
  `random.Random(seed)`, then contiguous slices ending at `int(n * cumulative_ratio)`.
- `parse_split_parts(["train:regex", ...])` and `pattern_split(shards, patterns)`: each pattern is brace-expanded,
  every piece is a regex `re.match`ed (anchored at the start only) against the relative shard path.
  `unmatched_parts(result)` lists split names that received no shard (energon silently writes them empty).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from energon_arrow.adapters import NotFound
from energon_arrow.meta._yaml import dump_yaml, parse_json, parse_yaml, parse_yaml_tracked
from energon_arrow.meta.braces import check_all, collapse_names, expand_all, expand_braces
from energon_arrow.meta.constants import META_DIR, SPLIT_YAML
from energon_arrow.meta.errors import MetaError
from energon_arrow.meta.manifest import read_text_verified
from energon_arrow.meta.split_lines import parse_split_lines

DEFAULT_SPLIT_NAMES = ("train", "val", "test")


@dataclass
class SplitConfig:
    split_parts: dict[str, list[str]]
    exclude: list[str] = field(default_factory=list)

    def expanded(self) -> SplitConfig:
        return SplitConfig(
            {name: expand_all(entries) for name, entries in self.split_parts.items()},
            expand_all(self.exclude),
        )

    def energon_sample_excludes(self) -> list[str]:
        """energon's `sample_excludes`, in its order: the expanded entries containing "/", iterated as energon
        builds them, a set taken from the set of all entries (where string hashes collide, a set's order follows
        its insertion order and history, so only the same steps give energon's order in this process)."""
        every = {e for e in expand_all(self.exclude)}  # a comprehension as energon builds it, not set()
        return list({e for e in every if "/" in e})

    def excluded_shards(self, shards=None) -> set[str]:
        """Whole shards excluded: expanded entries naming a shard of `shards` (default: not `<x>.tar/<key>`)."""
        return self.classify_excludes(shards)[0]

    def excluded_samples(self, shards=None) -> dict[str, set[str]]:
        """`"<shard>/<sample key>"` entries as shard -> excluded keys (the longest known shard prefix wins)."""
        return self.classify_excludes(shards)[1]

    def classify_excludes(self, shards=None) -> tuple[set[str], dict[str, set[str]]]:
        """(`excluded_shards`, `excluded_samples`) from one brace expansion of `exclude`."""
        known = None if shards is None else set(shards)
        whole: set[str] = set()
        out: dict[str, set[str]] = {}
        for e in expand_all(self.exclude):
            if e in known if known is not None else ".tar/" not in e:
                whole.add(e)
                continue
            cut = e.rfind("/")  # from the last "/" backwards: the longest matching prefix wins
            while cut > 0 and not (e[:cut] in known if known is not None else e[:cut].endswith(".tar")):
                cut = e.rfind("/", 0, cut)
            if cut > 0:
                out.setdefault(e[:cut], set()).add(e[cut + 1 :])
        return whole, out

    def shards(self, part: str) -> list[str]:
        """Expanded shard list of `part`, minus excluded entries (energon's WebdatasetMeta order)."""
        if part not in self.split_parts:
            raise MetaError(f"split part {part!r} not in split config (has {sorted(self.split_parts)})")
        exp = self.expanded()
        excluded = set(exp.exclude)
        return [s for s in exp.split_parts[part] if s not in excluded]


def parse_split(text: str, where: str = SPLIT_YAML, json_format: bool = False) -> SplitConfig:
    raw = parse_split_lines(text) if not json_format else None  # the common layouts, fast
    if raw is None:
        raw = parse_json(text, where) if json_format else parse_yaml(text, where)
    if not isinstance(raw, dict) or "split_parts" not in raw:
        raise MetaError(f"{where}: expected a mapping with 'split_parts'")
    unknown = [k for k in raw if k not in ("split_parts", "exclude")]
    if unknown:
        lines = {} if json_format else getattr(parse_yaml_tracked(text, where), "key_lines", {})
        at = f"{where}:{lines[unknown[0]]}" if unknown[0] in lines else where
        raise MetaError(f"{at}: unknown key {unknown[0]!r} (a split config takes split_parts, exclude)")
    parts = raw["split_parts"]
    if not isinstance(parts, dict):
        raise MetaError(f"{where}: 'split_parts' must map split names to lists of shards")
    out: dict[str, list[str]] = {}
    for name, entries in parts.items():
        entries = [] if entries is None else entries
        if not isinstance(entries, list) or not {*map(type, entries)} <= {str}:
            raise MetaError(f"{where}: split_parts[{name!r}] must be a list of shard paths")
        out[str(name)] = list(entries)
    exclude = raw.get("exclude") or []
    if not isinstance(exclude, list) or not {*map(type, exclude)} <= {str}:
        raise MetaError(f"{where}: 'exclude' must be a list of shard paths or '<shard>/<sample key>' entries")
    for name, entries in out.items():
        check_all(entries, f"{where}: split_parts[{name!r}]")
    check_all(exclude, f"{where}: exclude")
    return SplitConfig(out, list(exclude))


def read_split(storage, name: str = SPLIT_YAML) -> SplitConfig:
    rel = f"{META_DIR}/{name}"
    try:
        text = read_text_verified(storage, rel)  # user-editable: an edit is used, a damaged read is not
        return parse_split(text, storage.url_of(rel), json_format=name.endswith(".json"))
    except NotFound:
        if name != SPLIT_YAML:
            raise
    rel = f"{META_DIR}/split.json"
    return parse_split(storage.read_text(rel), storage.url_of(rel), json_format=True)


def split_yaml_bytes(config: SplitConfig, collapse: bool = True) -> bytes:
    parts = {
        name: (collapse_names(entries) if collapse else list(entries))
        for name, entries in config.split_parts.items()
    }
    return dump_yaml({"split_parts": parts, "exclude": list(config.exclude)})


def parse_split_ratio(text: str, names: tuple[str, ...] = DEFAULT_SPLIT_NAMES) -> list[tuple[str, float]]:
    """`"8,1,1"` or `"0.8, 0.1, 0.1"` -> [(train, 8.0), (val, 1.0), (test, 1.0)]."""
    try:
        values = [float(x.strip()) for x in text.split(",")]
    except ValueError:
        values = []
    if len(values) != len(names) or any(v < 0 or v != v for v in values) or sum(values) <= 0:
        raise MetaError(
            f"--split-ratio {text!r}: expected {len(names)} non-negative numbers with a positive sum, like 8,1,1"
        )
    return list(zip(names, values))


def ratio_split(
    shards: list[str], ratios: list[tuple[str, float]], shuffle_seed: int | None = None
) -> dict[str, list[str]]:
    """energon's ratio split: whole shards, contiguous slices of the (optionally shuffled) shard list."""
    total = sum(r for _, r in ratios)
    if total <= 0:
        raise MetaError("split ratios must have a positive sum")
    normalised = [(name, r / total) for name, r in ratios]
    order = list(shards)
    if shuffle_seed is not None:
        random.Random(shuffle_seed).shuffle(order)
    result: dict[str, list[str]] = {}
    cumulative = 0.0
    start = 0
    for name, r in normalised:
        cumulative += r
        end = int(len(order) * cumulative)
        result[name] = order[start:end]
        start = end
    return result


def parse_split_parts(specs: list[str] | tuple[str, ...]) -> list[tuple[str, str]]:
    """`["train:shards/0.*", "val:shards/1.*"]` -> [(name, pattern)]; every regex piece is compiled to check it."""
    out = []
    for spec in specs:
        name, sep, pattern = spec.partition(":")
        if not sep or not name:
            raise MetaError(f"--split-parts {spec!r}: expected NAME:REGEX, like train:shards/train-.*")
        for piece in expand_braces(pattern, f"--split-parts {spec!r}"):
            try:
                re.compile(piece)
            except re.error as exc:
                raise MetaError(
                    f"--split-parts {spec!r}: invalid regex {piece!r} at position {exc.pos}: {exc.msg}"
                ) from None
        out.append((name, pattern))
    return out


def pattern_split(shards: list[str], patterns: list[tuple[str, str]]) -> dict[str, list[str]]:
    """energon's --split-parts: a shard joins every split with a regex that `re.match`es its path."""
    result: dict[str, list[str]] = {}
    for name, pattern in patterns:
        compiled = [re.compile(p) for p in expand_braces(pattern)]
        result[name] = [s for s in shards if any(c.match(s) for c in compiled)]
    return result


def unmatched_parts(split: dict[str, list[str]]) -> list[str]:
    return [name for name, shards in split.items() if not shards]
