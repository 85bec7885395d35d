"""The index columns of one batch's rows, gathered once per batch with plain numpy indexing.

A split opened from the row index exposes its columns as `MappedColumn`s (loader/split_rows.py): every access maps
split rows to dataset rows and indexes a memory map, which is general but costs tens of microseconds per column
and batch. A batch needs up to eight columns of the same rows (shard, offset, size, sample index, each part's
offset and size, the keys), so `SourceColumns` maps the rows once and gathers each table with one fancy index of
the plain arrays behind the maps (the row table holds offset and size side by side, a part table its offset and
size). Sources with in-memory arrays (JSONL, joined metadatasets, `map_index`) are indexed directly.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from energon_arrow.loader.source import SplitSource
from energon_arrow.loader.split_rows import MappedColumn, MappedKeys, RowMap


class SourceColumns:
    """Per-batch column reads of one source (see the module docstring); one per source and process."""

    def __init__(self, src: SplitSource):
        self.src = src
        cols = [src.shard_id, src.sample_index, src.byte_offset, src.byte_size]
        parts = src.parts or {}
        cols += [c for pair in parts.values() for c in pair]
        rowmap = src.rowmap
        self.mapped = (
            rowmap is not None
            and all(isinstance(c, MappedColumn) and c.rowmap is rowmap for c in cols)
            and (src.shard_id.kind, src.sample_index.kind) == ("shard", "sample_index")
        )
        if self.mapped:
            self._span = _pair_table(src.byte_offset, src.byte_size)
            self._parts = {k: t for k, (o, z) in parts.items() if (t := _pair_table(o, z)) is not None}
        self._keys = _key_buffers(src.keys)

    def batch(self, rows: np.ndarray) -> BatchColumns:
        return BatchColumns(self, np.asarray(rows, np.int64))


class BatchColumns:
    """The columns of `rows`, each computed on first use."""

    def __init__(self, cols: SourceColumns, rows: np.ndarray):
        self.cols, self.rows = cols, rows
        self._g: tuple[np.ndarray, np.ndarray] | None = None
        self._span: tuple[np.ndarray, np.ndarray] | None = None
        self._shard: np.ndarray | None = None

    def _dataset_rows(self) -> tuple[np.ndarray, np.ndarray]:
        if self._g is None:
            self._g = self.cols.src.rowmap.dataset_rows(self.rows)
        return self._g

    @property
    def shard(self) -> np.ndarray:
        if self._shard is None:
            src = self.cols.src
            if self.cols.mapped:
                self._shard = src.rowmap.shard[self._dataset_rows()[1]]
            else:
                self._shard = np.asarray(src.shard_id[self.rows], np.int64)
        return self._shard

    def span(self) -> tuple[np.ndarray, np.ndarray]:
        """(byte offset, byte size) of each row's sample in its shard."""
        if self._span is None:
            cols, src = self.cols, self.cols.src
            if cols.mapped and cols._span is not None:
                table, a, b = cols._span
                t = table[self._dataset_rows()[0]]
                self._span = (t[:, a], t[:, b])
            else:
                self._span = (np.asarray(src.byte_offset[self.rows]), np.asarray(src.byte_size[self.rows]))
        return self._span

    def sample_index(self) -> np.ndarray:
        src = self.cols.src
        if self.cols.mapped:
            g, _ = self._dataset_rows()
            return g - src.sample_index.shard_starts[self.shard]
        return np.asarray(src.sample_index[self.rows])

    def part(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(offset relative to the sample, size) of part `name` of each row (offset -1: the sample lacks it)."""
        pair = self.cols._parts.get(name) if self.cols.mapped else None
        if pair is not None:
            table, a, b = pair
            t = table[self._dataset_rows()[0]]
            return t[:, a], t[:, b]
        off, size = self.cols.src.parts[name]
        return np.asarray(off[self.rows]), np.asarray(size[self.rows])

    def part_crc(self, name: str) -> np.ndarray:
        """The recorded CRC32C of part `name` of each row (SplitSource.part_crcs; meaningless where it is absent)."""
        return np.asarray(self.cols.src.part_crcs[name][self._dataset_rows()[0]])

    def keys(self) -> list[str]:
        kb = self.cols._keys
        src = self.cols.src
        if kb is None:
            return src.keys.take(self.rows).to_pylist()
        offsets, data, rowmap = kb
        if rowmap is None:
            g = self.rows
        elif rowmap is src.rowmap:
            g = self._dataset_rows()[0]
        else:
            g = rowmap.dataset_rows(self.rows)[0]
        lo, hi = offsets[g], offsets[g + 1]
        size = hi - lo
        ends = np.cumsum(size)
        # the keys' bytes gathered into one buffer (one index per byte), decoded at once when ASCII
        idx = np.repeat(lo - (ends - size), size) + np.arange(int(ends[-1]) if len(ends) else 0)
        joined = data[idx].tobytes()
        if joined.isascii():
            text = joined.decode("ascii")
            return [text[a:b] for a, b in zip((ends - size).tolist(), ends.tolist())]
        return [str(joined[a:b], "utf-8") for a, b in zip((ends - size).tolist(), ends.tolist())]


def _pair_table(first: MappedColumn, second: MappedColumn) -> tuple[np.ndarray, int, int] | None:
    """(the plain array behind both columns, first's column, second's column) when two mapped columns are
    columns of one row-major table (one gather reads both), else None."""
    if first.kind != "table" or second.kind != "table" or first.table is not second.table:
        return None
    return np.asarray(first.table), first.col, second.col


def _key_buffers(keys) -> tuple[np.ndarray, np.ndarray, RowMap | None] | None:
    """(offsets, data, the rowmap from split rows to its rows or None) of an unsliced large-string key array
    without nulls (the row index's and map_index's); None for other key columns (read through Arrow)."""
    mapped = isinstance(keys, MappedKeys)
    arr = keys.all if mapped else keys
    if not isinstance(arr, pa.LargeStringArray) or arr.offset or arr.null_count:
        return None
    _, offsets, data = arr.buffers()
    off = np.frombuffer(offsets, np.int64, len(arr) + 1)
    chars = np.frombuffer(data, np.uint8, int(off[-1])) if data is not None else np.zeros(0, np.uint8)
    return off, chars, keys.rowmap if mapped else None
