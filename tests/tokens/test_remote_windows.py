"""Remote token files: sequential reads switch to large windows, random reads stay exact."""

from __future__ import annotations

import numpy as np

from energon_arrow.adapters import open_storage
from energon_arrow.tokens.remote import (
    SEQUENTIAL_MIN,
    SEQUENTIAL_SLACK,
    RangeCache,
    next_readahead,
)

MIB = 1 << 20


def test_next_readahead():
    big = 16 * MIB
    assert next_readahead(0, 0, -1, 0, 0, big) == (0, 0)  # first read: nothing to continue
    assert next_readahead(0, 0, 1000, 1000, 0, big) == (0, 1)  # one continuation: not yet a stream
    assert next_readahead(0, 1, 1000, 1000, 0, big) == (SEQUENTIAL_MIN, 2)
    assert next_readahead(SEQUENTIAL_MIN, 2, 5000, 5000 + SEQUENTIAL_SLACK, 0, big) == (2 * SEQUENTIAL_MIN, 3)
    assert next_readahead(big, 9, 9 * MIB, 9 * MIB - 100, 0, big) == (big, 10)  # a straddling read
    assert next_readahead(big, 9, 30 * MIB, 2 * MIB, 4096, big) == (4096, 0)  # a jump back: exact again
    assert next_readahead(big, 9, 1000, 1001 + SEQUENTIAL_SLACK, 0, big) == (0, 0)  # a jump forward


def _cache(memory_root, data, capacity=64 * MIB):
    url, _ = memory_root
    store = open_storage(url)
    store.makedirs("")
    with store.fs.open(store.path_of("t.bin"), "wb") as f:
        f.write(data)
    return RangeCache(store, "t.bin", len(data), capacity)


def test_sequential_reads_use_windows(memory_root):
    data = np.random.default_rng(0).integers(0, 255, 24 * MIB, np.uint8).tobytes()
    cache = _cache(memory_root, data)
    seq = 4096
    out = np.empty(seq * 8, np.uint8)
    for first in range(0, len(data) // seq, 8):  # batches of 8 sequences in file order
        starts = (first + np.arange(8, dtype=np.int64)) * seq
        cache.read_into(starts, np.full(8, seq), out, np.arange(8, dtype=np.int64) * seq)
        assert out.tobytes() == data[first * seq : (first + 8) * seq]
    assert cache.requests < 16  # 768 batches; windows of 1, 2, 4, ... 16 MiB
    assert cache.bytes_fetched == len(data)


def test_random_reads_stay_exact(memory_root):
    data = np.random.default_rng(1).integers(0, 255, 8 * MIB, np.uint8).tobytes()
    cache = _cache(memory_root, data)
    rng = np.random.default_rng(2)
    starts = rng.permutation(len(data) // 4096)[:200].astype(np.int64) * 4096
    out = np.empty(4096, np.uint8)
    for s in starts.tolist():
        cache.read_into(np.array([s]), np.array([4096]), out, np.array([0]))
        assert out.tobytes() == data[s : s + 4096]
    assert cache.bytes_fetched == 200 * 4096
