"""A split as runs of dataset rows, and its columns computed per access from the mapped row index.

A split iterates its shards in split.yaml order minus excluded shards, each shard's samples by sample_index minus
excluded samples (energon 7.4.1). Over the row index (loader/row_index.py) that is a list of runs of consecutive
dataset rows: one per shard, cut at each excluded sample. `RowMap` holds the runs (O(shards + excluded samples)),
maps split rows to dataset rows with one binary search per row, and the column objects below (`MappedColumn`,
`MappedKeys`) read only the rows asked for, so opening a split and reading a batch never touch the whole table.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from energon_arrow.loader.row_index import RowIndex


@dataclass(frozen=True)
class RowMap:
    """Split rows [starts[j], starts[j+1]) are dataset rows first[j] + (r - starts[j]), all of shard shard[j]."""

    starts: np.ndarray  # int64 [runs + 1]
    first: np.ndarray  # int64 [runs]
    shard: np.ndarray  # int64 [runs]
    # the last (rows, result) of dataset_rows: a batch reads several columns for the same rows
    _last: list = field(default_factory=list, compare=False, repr=False)

    def __len__(self) -> int:
        return int(self.starts[-1])

    def runs_of(self, rows: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.starts, rows, side="right") - 1

    def dataset_rows(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(dataset rows, run of each) of split rows `rows` (bounds-checked like numpy indexing)."""
        rows = np.asarray(rows, np.int64)
        last = self._last[0] if self._last else None  # one read: a fetch thread may replace it meanwhile
        if last is not None and last[0].shape == rows.shape and np.array_equal(last[0], rows):
            return last[1]
        key = rows.copy()
        n = len(self)
        if rows.size and (rows.min() < -n or rows.max() >= n):
            bad = rows[(rows < -n) | (rows >= n)][0]
            raise IndexError(f"index {int(bad)} is out of bounds for a split of {n} rows")
        rows = np.where(rows < 0, rows + n, rows)
        j = self.runs_of(rows)
        out = (self.first[j] + (rows - self.starts[j]), j)
        for a in out:
            a.flags.writeable = False  # shared by the callers of the same rows
        self._last[:] = [(key, out)]
        return out

    def slice(self, lo: int, hi: int) -> RowMap:
        """Split rows [lo, hi) as a RowMap of their own."""
        n = len(self)
        lo, hi = max(0, min(lo, n)), max(0, min(hi, n))
        hi = max(lo, hi)
        if lo == hi:
            return RowMap(np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
        a, b = int(self.runs_of(np.int64(lo))), int(self.runs_of(np.int64(hi - 1))) + 1
        starts = np.clip(self.starts[a : b + 1], lo, hi) - lo
        first = self.first[a:b] + (np.maximum(self.starts[a:b], lo) - self.starts[a:b])
        return RowMap(starts.astype(np.int64), first, self.shard[a:b])

    def shard_runs(self) -> tuple[np.ndarray, np.ndarray]:
        """(start, length) of each maximal run of rows of one shard (adjacent runs of one shard merged)."""
        if not len(self.first):
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        sizes = np.diff(self.starts)
        keep = sizes > 0
        starts, shard = self.starts[:-1][keep], self.shard[keep]
        new = np.r_[True, shard[1:] != shard[:-1]]
        run_starts = starts[new]
        return run_starts, np.diff(np.r_[run_starts, len(self)])


def _index(key, n: int):
    """Normalise an indexing key: (array of split rows, is_scalar)."""
    if isinstance(key, slice):
        return np.arange(*key.indices(n), dtype=np.int64), False
    if isinstance(key, (int, np.integer)):
        return np.asarray([key], np.int64), True
    arr = np.asarray(key)
    if arr.dtype == bool:
        return np.flatnonzero(arr), False
    return arr.astype(np.int64, copy=False), False


class MappedColumn:
    """One int64 column of a split, read from the row index only where indexed (ndarray-like: len, [int],
    [slice], [array], np.asarray; other ndarray methods work on the materialised column)."""

    dtype = np.dtype(np.int64)

    def __init__(self, rowmap: RowMap, table: np.ndarray | None, col: int, kind: str = "table", starts=None):
        self.rowmap, self.table, self.col, self.kind, self.shard_starts = rowmap, table, col, kind, starts

    def __len__(self) -> int:
        return len(self.rowmap)

    @property
    def shape(self) -> tuple[int]:
        return (len(self),)

    def values(self, rows: np.ndarray) -> np.ndarray:
        g, j = self.rowmap.dataset_rows(rows)
        if self.kind == "shard":
            return self.rowmap.shard[j]
        if self.kind == "sample_index":
            return g - self.shard_starts[self.rowmap.shard[j]]
        return np.asarray(self.table[g, self.col])

    def __getitem__(self, key):
        rows, scalar = _index(key, len(self))
        out = self.values(rows)
        return out[0] if scalar else out

    def __array__(self, dtype=None, copy=None):
        out = self.values(np.arange(len(self), dtype=np.int64))
        return out if dtype is None else out.astype(dtype)

    def __getattr__(self, name: str):
        """Other ndarray methods and attributes (sum, min, ...) over the whole column, materialised: O(rows),
        for whole-table users only."""
        if name.startswith("_") or not hasattr(np.ndarray, name):
            raise AttributeError(name)
        return getattr(np.asarray(self), name)

    def with_rowmap(self, rowmap: RowMap) -> MappedColumn:
        return MappedColumn(rowmap, self.table, self.col, self.kind, self.shard_starts)


def _whole_column(op: str):
    def method(self, *args):
        return getattr(np.asarray(self), op)(*args)

    method.__name__ = op
    return method


# operators (col > 0, col + 1, ...) on the materialised column, as for `__getattr__`
for _op in ("lt", "le", "gt", "ge", "eq", "ne", "add", "sub", "mul", "floordiv", "mod", "neg", "iter"):
    setattr(MappedColumn, f"__{_op}__", _whole_column(f"__{_op}__"))
MappedColumn.__hash__ = None  # type: ignore[assignment]  (compared by value, like an ndarray)


class MappedKeys:
    """The sample keys of a split (Arrow-like: len, [int] -> scalar, [slice], take, to_pylist, cast)."""

    def __init__(self, rowmap: RowMap, keys: pa.LargeStringArray):
        self.rowmap, self.all = rowmap, keys
        self.type = keys.type

    def __len__(self) -> int:
        return len(self.rowmap)

    def take(self, rows) -> pa.Array:
        rows = rows.to_numpy(zero_copy_only=False) if isinstance(rows, pa.Array) else rows
        g, _ = self.rowmap.dataset_rows(np.asarray(rows, np.int64))
        return self.all.take(pa.array(g, pa.int64()))

    def __getitem__(self, key):
        if isinstance(key, slice) and key.step in (None, 1):
            lo, hi, _ = key.indices(len(self))
            return MappedKeys(self.rowmap.slice(lo, hi), self.all)
        rows, scalar = _index(key, len(self))
        out = self.take(rows)
        return out[0] if scalar else out

    def to_arrow(self) -> pa.Array:
        return self.take(np.arange(len(self), dtype=np.int64))

    def to_pylist(self) -> list:
        return self.to_arrow().to_pylist()

    def cast(self, target) -> pa.Array:
        return self.to_arrow().cast(target)


def split_row_map(
    index: RowIndex, shard_ids: np.ndarray, excluded: dict[int, list[str]], gaps: list | None = None
) -> RowMap:
    """The runs of a split: `shard_ids` in split order (excluded shards already removed); `excluded`: shard id ->
    keys of excluded samples (matched within that shard; keys it lacks match nothing). `gaps`, a list, gets the
    positions of the excluded samples in energon's index space of the split (its shards' samples in split order,
    excluded samples included: `excluded_positions`), one array per shard with exclusions."""
    shard_ids = np.asarray(shard_ids, np.int64)
    starts = np.asarray(index.shard_starts)
    first, count, shard = [starts[shard_ids]], [starts[shard_ids + 1] - starts[shard_ids]], [shard_ids]
    if excluded:
        keys = index.keys()
        cut = np.isin(shard_ids, np.fromiter(excluded, np.int64, len(excluded)))
        # energon's index of each shard's first sample: the samples of the split's shards before it
        full_start = np.r_[0, np.cumsum(count[0])][:-1][cut]
        pieces = []  # per excluded-from shard: its runs between the excluded samples
        for s, base in zip(shard_ids[cut].tolist(), full_start.tolist()):
            lo, hi = int(starts[s]), int(starts[s + 1])
            hit = pc.is_in(keys.slice(lo, hi - lo), value_set=pa.array(excluded[s], pa.large_string()))
            gone = np.flatnonzero(hit.to_numpy(zero_copy_only=False))
            if gaps is not None:
                gaps.append(gone + base)
            gone += lo
            a = np.r_[lo, gone + 1]
            b = np.r_[gone, hi]
            pieces.append((a, b - a, np.full(len(a), s, np.int64)))
        # shards keep their split order; a shard with exclusions is replaced by its pieces
        order_first, order_count, order_shard = [], [], []
        piece_iter = iter(pieces)
        for keep, f, c, s in _segments(cut, first[0], count[0], shard_ids):
            if keep:
                order_first.append(f), order_count.append(c), order_shard.append(s)
            else:
                for _ in range(len(s)):
                    a, sz, sh = next(piece_iter)
                    order_first.append(a), order_count.append(sz), order_shard.append(sh)
        first, count, shard = order_first, order_count, order_shard
    f = np.concatenate(first) if first else np.zeros(0, np.int64)
    c = np.concatenate(count) if count else np.zeros(0, np.int64)
    s = np.concatenate(shard) if shard else np.zeros(0, np.int64)
    keep = c > 0  # empty runs: an excluded sample at a shard's start or end, an empty shard
    f, c, s = f[keep], c[keep], s[keep]
    return RowMap(np.r_[0, np.cumsum(c)].astype(np.int64), f.astype(np.int64), s)


def _segments(cut: np.ndarray, first: np.ndarray, count: np.ndarray, shard: np.ndarray):
    """Consecutive stretches of shards with the same `cut` flag: (not cut, first, count, shard) slices."""
    if not len(cut):
        return
    edges = np.flatnonzero(np.r_[True, cut[1:] != cut[:-1], True])
    for a, b in zip(edges[:-1].tolist(), edges[1:].tolist()):
        yield not cut[a], first[a:b], count[a:b], shard[a:b]


# ---- energon's index space of a split with excluded samples ------------------------------------------------------
# energon 7.4.1 keeps a split's excluded samples (split.yaml `exclude: [<shard>/<key>]`) in its index: its worker
# slices, sequence shuffling and len() count them, and its sample loader skips them as it reads them. `gaps` (sorted
# int64) are their positions in that index space (0: the source's first position); a split row is the number of
# kept positions before it. All three maps are one binary search per element.


def excluded_positions(gaps: list) -> np.ndarray:
    """The sorted positions of `split_row_map`'s `gaps` arrays, as one array."""
    return np.unique(np.concatenate(gaps)) if gaps else np.zeros(0, np.int64)


def rows_before(gaps: np.ndarray, positions):
    """The kept positions (split rows) before each of `positions` in energon's index space."""
    return positions - np.searchsorted(gaps, positions, side="left")


def kept_rows(gaps: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """The split rows of the kept ones of `positions` (energon's index space), in their order."""
    at = np.searchsorted(gaps, positions, side="left")
    hit = np.take(gaps, np.minimum(at, len(gaps) - 1)) == positions if len(gaps) else np.zeros(len(at), bool)
    return (positions - at)[~hit]


def positions_of(gaps: np.ndarray, rows):
    """energon's index of split rows `rows` (the inverse of `kept_rows`)."""
    shift = gaps - np.arange(len(gaps), dtype=np.int64)  # the kept positions before each excluded one
    return rows + np.searchsorted(shift, rows, side="right")
