"""Per-batch column gathers (loader/batch_columns.py) give exactly what indexing each column of the split gives."""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa

from energon_arrow.loader.batch_columns import SourceColumns
from energon_arrow.loader.source import map_index, open_split


def _in_memory(src):
    """The split as numpy and Arrow arrays moved into memory maps, as JSONL and joined sources hold them."""
    return map_index(
        dataclasses.replace(
            src,
            shard_id=np.asarray(src.shard_id),
            sample_index=np.asarray(src.sample_index),
            byte_offset=np.asarray(src.byte_offset),
            byte_size=np.asarray(src.byte_size),
            keys=src.keys.to_arrow(),
            parts={k: (np.asarray(o), np.asarray(z)) for k, (o, z) in src.parts.items()},
            rowmap=None,
            _key_maps=[],
        )
    )


def _check(src, rows):
    cols = SourceColumns(src).batch(rows)
    offset, size = cols.span()
    assert np.array_equal(offset, np.asarray(src.byte_offset[rows]))
    assert np.array_equal(size, np.asarray(src.byte_size[rows]))
    assert np.array_equal(cols.shard, np.asarray(src.shard_id[rows]))
    assert np.array_equal(cols.sample_index(), np.asarray(src.sample_index[rows]))
    for name, (off, sz) in src.parts.items():
        got_off, got_size = cols.part(name)
        assert np.array_equal(got_off, np.asarray(off[rows])) and np.array_equal(
            got_size, np.asarray(sz[rows])
        )
    assert cols.keys() == src.keys.take(rows).to_pylist()


def test_mapped_split_subset_and_in_memory_source(prepared_root):
    src = open_split(prepared_root, "train")
    rng = np.random.default_rng(3)
    rows = rng.choice(len(src), 40, replace=True)  # unsorted, repeated rows
    cols = SourceColumns(src)
    assert cols.mapped
    _check(src, rows)
    _check(src, np.zeros(0, np.int64))
    sub = src.subset(7, len(src) - 3)  # columns over a sliced row map
    assert SourceColumns(sub).mapped
    _check(sub, rng.choice(len(sub), 20))
    plain = _in_memory(src)  # numpy arrays in memory maps (JSONL, joined)
    assert not SourceColumns(plain).mapped
    _check(plain, rows)


def test_non_ascii_and_other_key_columns(prepared_root):
    src = open_split(prepared_root, "train")
    plain = _in_memory(src)
    n = len(plain)
    keys = [f"ключ-{i}" if i % 3 else f"key-{i}" for i in range(n)]
    rows = np.arange(n)[::-1]
    for arr in (pa.array(keys, pa.large_string()), pa.array(keys, pa.string())):
        other = dataclasses.replace(plain, keys=arr)
        assert SourceColumns(other).batch(rows).keys() == [keys[r] for r in rows]
