"""What a prepare reports: counts, splits, the shards it skipped as bad, warnings and its run time."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class BadShard:
    path: str
    error: str


@dataclass
class PrepareResult:
    root: str
    shards: int = 0
    samples: int = 0
    parts: int = 0
    bytes: int = 0
    part_types: dict[str, int] = field(default_factory=dict)
    splits: dict[str, int] = field(default_factory=dict)  # split -> shard count
    split_samples: dict[str, int] = field(default_factory=dict)
    indexed: int = 0  # shards read this run
    reused: int = 0  # shards whose rows came from the previous index
    resumed: int = 0  # shards indexed by an interrupted prepare (kept in .nv-meta/.prepare-work)
    energon_index: bool = True  # index.sqlite written
    media: int = 0  # media metadata rows in index.sqlite (extracted this run or kept from the previous index)
    removed: int = 0  # shards of the previous index that are gone
    bad_shards: list[BadShard] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d["bad_shards"] = [b.__dict__ for b in self.bad_shards]
        return d
