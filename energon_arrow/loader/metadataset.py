"""energon's MetadatasetV2 YAML (the subset energon-arrow loads): one dataset, `blend` with weights or
`blend_epochized` with repetitions, per entry `path`, `split_part`, `subflavors`, `subset: {range: [a, b]}`
(absolute indices, `end`, or percentages) and `aux: {name: path}` sources for cookers.

Paths are relative to the YAML file's folder (local or object store). `join:` and nested metadatasets are
refused with a clear error rather than half-supported.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

from energon_arrow.adapters import open_storage
from energon_arrow.loader.errors import LoaderError
from energon_arrow.meta import MetaError, parse_yaml

_ENTRY_KEYS = {"path", "split_part", "subflavors", "subset", "aux", "weight", "repetitions"}


@dataclass
class MetadatasetEntry:
    path: str  # absolute URL / path
    split_part: str | None = None
    subflavors: dict | None = None
    subset: tuple | None = None  # (start, end) as given: int, "end" or "12.5%"
    aux: dict = field(default_factory=dict)  # name -> absolute URL / path
    weight: float = 1.0
    repetitions: float = 1.0


@dataclass
class MetadatasetSplit:
    mode: str  # "single" | "blend" | "blend_epochized"
    entries: list[MetadatasetEntry]


def is_metadataset(path: str) -> bool:
    return str(path).endswith((".yaml", ".yml"))


def _join(base: str, rel: str) -> str:
    if "://" in rel or rel.startswith("/"):
        return rel
    if "://" not in base:
        return posixpath.normpath(posixpath.join(base, rel))
    scheme, _, rest = base.partition("://")
    return f"{scheme}://{posixpath.normpath(posixpath.join(rest, rel))}"


def _entry(raw: dict, base: str, where: str, split: str) -> MetadatasetEntry:
    if not isinstance(raw, dict) or "path" not in raw:
        raise LoaderError(f"{where}: split {split!r}: every dataset entry needs a 'path' (got {raw!r})")
    unknown = sorted(map(str, set(raw) - _ENTRY_KEYS))
    if unknown:
        raise LoaderError(
            f"{where}: split {split!r}: unsupported entry keys {unknown} (supported: {sorted(_ENTRY_KEYS)})"
        )
    if not isinstance(raw["path"], str) or not raw["path"]:
        raise LoaderError(f"{where}: split {split!r}: 'path' must be a non-empty string, got {raw['path']!r}")
    for key in ("subflavors", "aux"):
        if raw.get(key) is not None and not isinstance(raw[key], dict):
            raise LoaderError(f"{where}: split {split!r}: {key!r} must be a mapping, got {raw[key]!r}")
    if raw.get("split_part") is not None and not isinstance(raw["split_part"], str):
        raise LoaderError(
            f"{where}: split {split!r}: 'split_part' must be a string, got {raw['split_part']!r}"
        )
    numbers = {}
    for key in ("weight", "repetitions"):
        value = raw.get(key, 1.0)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise LoaderError(f"{where}: split {split!r}: {key!r} must be a number, got {value!r}")
        numbers[key] = float(value)
    path = _join(base, raw["path"])
    if is_metadataset(path):
        raise LoaderError(
            f"{where}: nested metadataset {raw['path']!r} is not supported; list its datasets here"
        )
    subset = None
    if raw.get("subset") is not None:
        rng = raw["subset"].get("range") if isinstance(raw["subset"], dict) else None
        if not isinstance(rng, (list, tuple)) or len(rng) != 2:
            raise LoaderError(f"{where}: subset must be {{range: [start, end]}}, got {raw['subset']!r}")
        subset = tuple(rng)
    aux = {}
    for name, ref in (raw.get("aux") or {}).items():
        ref = str(ref)
        if ref.startswith("filesystem://"):
            aux[name] = "filesystem://" + _join(base, ref[len("filesystem://") :])
        else:
            aux[name] = _join(base, ref)
    return MetadatasetEntry(
        path=path,
        split_part=raw.get("split_part"),
        subflavors=raw.get("subflavors"),
        subset=subset,
        aux=aux,
        weight=numbers["weight"],
        repetitions=numbers["repetitions"],
    )


def read_metadataset(path: str, split: str, storage_options: dict | None = None) -> MetadatasetSplit:
    """The datasets of `split` in a MetadatasetV2 YAML."""
    base, name = posixpath.split(str(path).rstrip("/"))
    storage = open_storage(base or ".", storage_options)
    where = storage.url_of(name)
    try:
        doc = parse_yaml(storage.read_text(name), where)
    except MetaError as exc:  # names the line and column
        raise LoaderError(str(exc)) from None
    if not isinstance(doc, dict) or doc.get("__class__") != "MetadatasetV2":
        raise LoaderError(
            f"{where}: expected __class__: MetadatasetV2 (got {doc.get('__class__') if isinstance(doc, dict) else doc!r})"
        )
    splits = doc.get("splits") or {}
    if not isinstance(splits, dict):
        raise LoaderError(
            f"{where}: 'splits' must be a mapping of split name to datasets, got {splits!r:.200}"
        )
    if split not in splits:
        raise LoaderError(f"{where}: no split {split!r} (splits: {sorted(map(str, splits))})")
    spec = splits[split]
    base_url = storage.url
    if not isinstance(spec, dict):
        raise LoaderError(f"{where}: split {split!r} must be a mapping")
    if "join" in spec:
        raise LoaderError(f"{where}: split {split!r}: 'join' metadatasets are not supported by the loader")
    for mode in ("blend", "blend_epochized"):
        if mode in spec:
            items = spec[mode]
            if not isinstance(items, list) or not items:
                raise LoaderError(f"{where}: split {split!r}: {mode} must be a non-empty list")
            return MetadatasetSplit(mode, [_entry(e, base_url, where, split) for e in items])
    return MetadatasetSplit("single", [_entry(spec, base_url, where, split)])


def subset_bounds(subset: tuple | None, n: int, where: str) -> tuple[int, int]:
    """Absolute [start, end) of a subset range over n samples."""
    if subset is None:
        return 0, n

    def one(v, default):
        if v == "end":
            return n
        try:
            if isinstance(v, str) and v.endswith("%"):
                return int(round(float(v[:-1]) / 100 * n))
            return int(v)
        except (TypeError, ValueError, OverflowError):  # not a number, NaN or infinite
            raise LoaderError(f"{where}: bad subset bound {v!r}") from None

    start, end = one(subset[0], 0), one(subset[1], n)
    if not 0 <= start <= end <= n:
        raise LoaderError(f"{where}: subset range [{start}, {end}) outside the dataset's {n} samples")
    return start, end
