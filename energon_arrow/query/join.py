"""energon `join:` metadatasets as one DuckDB query: datasets joined by sample_key, energon's nonmatch rules.

energon 7.4.1 builds a join index (`JIDX0001`, int64 column count, then one (shard_idx, byte_offset, byte_size)
triple per dataset per row) with per-row SQLite work. Here every dataset contributes its effective split table and
one hash join produces the same rows: the primary split's samples in iteration order, each dataset's shard_idx being
the shard's position in that dataset's split.yaml list, nonmatch `skip` dropping the row, `none` filling -1, `error`
failing with the first missing key.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from energon_arrow.query.dataset import Dataset

NONMATCH = ("skip", "none", "error")
JOIN_INDEX_MAGIC = b"JIDX0001"


@dataclass
class JoinMember:
    """One dataset of a join: the dataset, its nonmatch rule, and optionally its own split part."""

    dataset: Dataset
    nonmatch: str = "error"
    split: str | None = None


def _members(datasets) -> list[tuple[str, JoinMember]]:
    items = (
        list(datasets.items())
        if isinstance(datasets, Mapping)
        else [(f"d{i}", d) for i, d in enumerate(datasets)]
    )
    out = []
    for name, m in items:
        member = m if isinstance(m, JoinMember) else JoinMember(m)
        if member.nonmatch not in NONMATCH:
            raise ValueError(
                f"join member {name!r}: nonmatch must be one of {', '.join(NONMATCH)}, got {member.nonmatch!r}"
            )
        if not name.isidentifier():
            raise ValueError(f"join member name {name!r} must be an identifier (it prefixes output columns)")
        out.append((name, member))
    if len(out) < 2:
        raise ValueError("a join needs a primary dataset and at least one more")
    if out[0][1].nonmatch != "error":
        raise ValueError(f"the primary join dataset {out[0][0]!r} must keep nonmatch 'error' (as in energon)")
    return out


def _split_of(member: JoinMember, split: str) -> str:
    part = member.split or split
    member.dataset._check_split(part)
    return part


def join_datasets(datasets, split: str) -> pa.Table:
    """Join datasets by sample_key like energon's `join:` metadataset for split `split`.

    `datasets`: {name: Dataset | JoinMember} (first = primary) or a list (names d0, d1, ...). Each member uses
    its effective split (its own `split` or this one). Sample keys are unique within a prepared dataset (energon's
    UNIQUE constraint; our prepare enforces it too), so each primary row matches at most one row per member.
    Returns one row per joined sample in the primary's iteration order: `sample_key`, then per dataset
    `{name}_shard_idx` (position in that dataset's split.yaml list), `{name}_byte_offset`, `{name}_byte_size`
    (int64; -1 for nonmatch 'none'), `{name}_shard_id` and `{name}_matched`."""
    members = _members(datasets)
    (pname, primary), others = members[0], members[1:]
    for _, member in members:
        member.dataset.exclusions()  # split_samples applies them (resolved once, cached)
    tables = {
        f"_join_{name}": member.dataset._internal(
            "SELECT shard_position, shard_id, sample_key, byte_offset, byte_size FROM split_samples WHERE split = ?",
            [_split_of(member, split)],
        )
        for name, member in others
    }
    psplit = _split_of(primary, split)
    base = "(SELECT * FROM split_samples WHERE split = $split)"
    select = ["p.sample_key", *_columns(pname, "p", False)]
    joins = []
    for name, member in others:
        kind = "JOIN" if member.nonmatch == "skip" else "LEFT JOIN"
        joins.append(f"{kind} _join_{name} AS j_{name} ON j_{name}.sample_key = p.sample_key")
        select += _columns(name, f"j_{name}", member.nonmatch == "none")
    ds = primary.dataset
    for name, member in others:
        if member.nonmatch != "error":
            continue
        missing = ds._internal(
            f"SELECT p.sample_key FROM {base} p ANTI JOIN _join_{name} j USING (sample_key) "
            "ORDER BY p.shard_position, p.sample_index LIMIT 1",
            {"split": psplit},
            tables,
        )
        if missing.num_rows:
            raise ValueError(
                f"join: sample key {missing.column(0)[0].as_py()!r} of {pname!r} is missing from {name!r} "
                f"({member.dataset.url}) and its nonmatch is 'error' (use 'skip' or 'none')"
            )
    sql = f"SELECT {', '.join(select)} FROM {base} p {' '.join(joins)} ORDER BY p.shard_position, p.sample_index"
    return ds._internal(sql, {"split": psplit}, tables)


def _columns(name: str, alias: str, fill: bool) -> list[str]:
    def col(expr, out, default="-1"):
        return f"coalesce({expr}, {default}) AS {out}" if fill else f"{expr} AS {out}"

    return [
        col(f"{alias}.shard_position::BIGINT", f"{name}_shard_idx"),
        col(f"{alias}.byte_offset", f"{name}_byte_offset"),
        col(f"{alias}.byte_size", f"{name}_byte_size"),
        f"{alias}.shard_id AS {name}_shard_id",
        f"{alias}.sample_key IS NOT NULL AS {name}_matched" if fill else f"true AS {name}_matched",
    ]


def join_index_array(joined: pa.Table, names: Sequence[str]) -> np.ndarray:
    """The joined rows as energon's join-index array, shape (rows, len(names), 3) int64."""
    cols = []
    for name in names:
        for field in ("shard_idx", "byte_offset", "byte_size"):
            cols.append(joined.column(f"{name}_{field}").to_numpy().astype(np.int64, copy=False))
    return (
        np.stack(cols, axis=1).reshape(joined.num_rows, len(names), 3)
        if cols
        else np.empty((0, 0, 3), np.int64)
    )


def join_index_bytes(joined: pa.Table, names: Sequence[str]) -> bytes:
    """energon's join index file (`JIDX0001`, column count, rows of int64 triples) for the joined rows."""
    arr = np.ascontiguousarray(join_index_array(joined, names), dtype="<i8")
    return JOIN_INDEX_MAGIC + struct.pack("<q", len(names)) + arr.tobytes()
