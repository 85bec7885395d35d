"""`.nv-meta/.info.json` (and legacy `.info.yaml`): the shard list and per-shard sample counts.

- `DatasetInfo(shard_counts, energon_version)`: `shard_counts` maps relative POSIX shard path -> sample count;
  its order defines energon's `tar_file_id` (see `shard_ids`).
- `parse_info(text, where, yaml=False)`, `read_info(storage)` (tries `.nv-meta/.info.json` then `.info.yaml`),
  `info_exists(storage)`.
- `info_json_bytes(info)`: the exact bytes energon writes (`json.dump(obj, f, indent=2)`, no trailing newline).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from energon_arrow.adapters import NotFound
from energon_arrow.meta._yaml import parse_json, parse_yaml
from energon_arrow.meta.constants import ENERGON_VERSION, INFO_JSON, INFO_YAML, META_DIR
from energon_arrow.meta.errors import MetaError
from energon_arrow.meta.manifest import read_text_verified


@dataclass
class DatasetInfo:
    shard_counts: dict[str, int]
    energon_version: str | None = ENERGON_VERSION
    source: str = field(default=INFO_JSON, compare=False)  # file it was read from

    @property
    def shards(self) -> list[str]:
        return list(self.shard_counts)

    @property
    def total_samples(self) -> int:
        return sum(self.shard_counts.values())

    def shard_ids(self) -> dict[str, int]:
        """Shard path -> tar_file_id (position in shard_counts)."""
        return {name: i for i, name in enumerate(self.shard_counts)}


def parse_info(text: str, where: str = INFO_JSON, yaml: bool = False) -> DatasetInfo:
    raw = parse_yaml(text, where) if yaml else parse_json(text, where)
    if not isinstance(raw, dict):
        raise MetaError(f"{where}: expected a mapping with 'shard_counts'")
    unknown = set(raw) - {"energon_version", "shard_counts"}
    if unknown:
        raise MetaError(f"{where}: unknown keys {sorted(unknown)} (expected energon_version, shard_counts)")
    counts = raw.get("shard_counts")
    if not isinstance(counts, dict):
        raise MetaError(f"{where}: 'shard_counts' must map shard paths to sample counts")
    for name, count in counts.items():
        if not isinstance(name, str) or isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise MetaError(
                f"{where}: shard_counts[{name!r}] = {count!r} is not a non-negative integer count"
            )
    version = raw.get("energon_version")
    return DatasetInfo(dict(counts), None if version is None else str(version), source=where)


def info_exists(storage) -> bool:
    return storage.exists(f"{META_DIR}/{INFO_JSON}") or storage.exists(f"{META_DIR}/{INFO_YAML}")


def read_info(storage) -> DatasetInfo:
    """Read `.nv-meta/.info.json`, falling back to the legacy `.info.yaml`."""
    for name, is_yaml in ((INFO_JSON, False), (INFO_YAML, True)):
        rel = f"{META_DIR}/{name}"
        try:
            text = read_text_verified(storage, rel)
        except NotFound:
            continue
        return parse_info(text, storage.url_of(rel), yaml=is_yaml)
    missing = storage.missing_root()
    if missing is not None:
        raise MetaError(f"{storage.url}: {missing}; check the path or URL")
    raise MetaError(
        f"{storage.url_of(META_DIR)}: no {INFO_JSON} or {INFO_YAML}; the dataset is not prepared "
        "(run `energon-arrow prepare`)"
    )


def info_json_bytes(info: DatasetInfo) -> bytes:
    obj = {"energon_version": info.energon_version, "shard_counts": dict(info.shard_counts)}
    return json.dumps(obj, indent=2).encode()
