"""The local sample reader: coalesced runs per shard, and announced batches read together."""

from __future__ import annotations

import numpy as np

from energon_arrow.loader import reader as reader_mod
from energon_arrow.loader.reader import SampleReader, run_starts
from energon_arrow.loader.source import open_split
from energon_arrow.loader.spans import Spans


def test_runs_restart_at_each_shard():
    """A shard's first range opens a read, and the running end of an earlier shard never merges a later shard's
    far-apart ranges (that read 2-4x the needed bytes: shard 0 ended at 5 MB, so shard 1's ranges at 0 and 3 MB
    were merged into one 3 MB read)."""
    shard = np.array([0, 0, 1, 1, 1, 2])
    start = np.array([4_000_000, 5_000_000, 0, 3_000_000, 3_010_000, 10])
    end = start + np.array([1000, 1000, 1000, 1000, 1000, 1000])
    assert run_starts(shard, start, end, max_gap=65536).tolist() == [True, True, True, True, False, True]
    # within max_gap of the running end of its own shard: merged, also past a shorter range in between
    shard = np.zeros(3, np.int64)
    start = np.array([0, 100, 150_000])
    end = np.array([120_000, 200, 151_000])
    assert run_starts(shard, start, end, max_gap=65536).tolist() == [True, False, False]


def test_runs_of_huge_shards_without_overflow():
    shard = np.array([0, 1, 1])
    start = np.array([0, 1 << 61, (1 << 61) + 10])
    end = start + 5
    assert run_starts(shard, start, end, max_gap=64).tolist() == [True, True, False]


def _bytes(data) -> list[bytes]:
    return [bytes(v) for v in data]


def test_announced_batches_are_read_in_one_pass(prepared_root, monkeypatch):
    src = open_split(prepared_root, "train")
    n = len(src)
    rng = np.random.default_rng(0)
    batches = [rng.choice(n, 8, replace=False) for _ in range(6)]
    alone = SampleReader(src)
    expected = [_bytes(alone.read(b)) for b in batches]
    passes = []
    reader = SampleReader(src)
    read_rows = reader._read_rows
    monkeypatch.setattr(reader, "_read_rows", lambda rows: passes.append(len(rows)) or read_rows(rows))
    for b in batches:
        reader.announce(b)
    got = [reader.read(b) for b in batches]
    assert [_bytes(g) for g in got] == expected
    assert passes == [48]  # all six batches in one pass
    assert all(isinstance(g, Spans) and len(g) == 8 for g in got)


def test_groups_stop_at_group_bytes(prepared_root, monkeypatch):
    src = open_split(prepared_root, "train")
    sizes = np.asarray(src.byte_size)
    batches = [np.arange(i * 4, i * 4 + 4) for i in range(5)]
    monkeypatch.setattr(reader_mod, "GROUP_BYTES", int(sizes[:8].sum()))  # two batches of these rows
    reader = SampleReader(src)
    passes = []
    read_rows = reader._read_rows
    monkeypatch.setattr(reader, "_read_rows", lambda rows: passes.append(len(rows)) or read_rows(rows))
    for b in batches:
        reader.announce(b)
    got = [_bytes(reader.read(b)) for b in batches]
    assert passes == [8, 8, 4]
    assert got == [_bytes(SampleReader(src).read(b)) for b in batches]


def test_unannounced_read_is_read_alone(prepared_root):
    """A caller that reads another batch than the one announced next gets that batch (the announced queue is
    dropped, not served out of order)."""
    src = open_split(prepared_root, "train")
    reader = SampleReader(src)
    reader.announce(np.array([0, 1]))
    reader.announce(np.array([2, 3]))
    other = np.array([5, 6, 7])
    assert _bytes(reader.read(other)) == _bytes(SampleReader(src).read(other))
    assert _bytes(reader.read(np.array([2, 3]))) == _bytes(SampleReader(src).read(np.array([2, 3])))
