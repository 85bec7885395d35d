"""Per part name: how many samples have it, counted in one streaming pass over `parts` (for `info`).

DuckDB's `count(DISTINCT (shard_id, sample_index))` per part name costs 10x a plain GROUP BY (27 s at 30M parts on
2 cores). The side index keeps parts in (shard_id, sample_index, offset) order, so a sample's parts are adjacent:
per batch, each row gets its sample's rank in the batch, duplicates of (sample, part name) are dropped with one
sort of `rank * names + name`, and a sample cut by a batch boundary is carried over. Memory: one batch.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from energon_arrow.tar.arrow import ints_to_numpy


def samples_per_part(batches: Iterable[pa.RecordBatch]) -> dict[str, int]:
    """{part name: samples having it} over batches of (shard_id, sample_index, part_name) in index order."""
    names: dict[str, int] = {}
    counts = np.zeros(0, np.int64)
    last_id, last_codes = None, set()
    for batch in batches:
        if batch.num_rows == 0:
            continue
        ids = (ints_to_numpy(batch.column(0)).astype(np.int64) << 32) | ints_to_numpy(batch.column(1))
        column = batch.column(2)
        if not pa.types.is_dictionary(column.type):
            column = pc.dictionary_encode(column)
        dictionary = column.dictionary.to_pylist()
        mapping = np.array([names.setdefault(n, len(names)) for n in dictionary], np.int64)
        codes = mapping[ints_to_numpy(column.indices)]
        width = max(len(names), 1)
        start = np.empty(len(ids), bool)
        start[0] = True
        np.not_equal(ids[1:], ids[:-1], out=start[1:])
        rank = np.cumsum(start) - 1
        unique = np.sort(
            rank * width + codes
        )  # a sort, not np.unique: numpy 2's hash path is 50x slower here
        unique = unique[np.concatenate([[True], unique[1:] != unique[:-1]])]
        found = np.bincount(unique % width, minlength=width)
        first = set(codes[rank == 0].tolist())
        if ids[0] == last_id:  # the sample continues from the previous batch: count its names once
            for code in first & last_codes:
                found[code] -= 1
        tail = set(codes[rank == rank[-1]].tolist())
        last_codes = tail | last_codes if ids[0] == ids[-1] == last_id else tail
        last_id = ids[-1]
        counts = np.concatenate([counts, np.zeros(width - len(counts), np.int64)]) + found
    return {name: int(counts[code]) for name, code in names.items()}
