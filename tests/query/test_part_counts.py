"""`samples_per_part` (info's samples-per-part-name count, one streaming pass) against a direct count, with
samples cut by batch boundaries and repeated part names."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from energon_arrow.query.part_counts import samples_per_part


@pytest.mark.parametrize("seed", range(20))
def test_matches_a_distinct_count(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 80))
    shard = np.sort(rng.integers(0, 3, n)).astype(np.int32)
    index = np.zeros(n, np.int64)
    for s in np.unique(shard):
        index[shard == s] = np.sort(rng.integers(0, 6, int((shard == s).sum())))
    names = rng.choice(["jpg", "txt", "json", "cls"], n)
    table = pa.table(
        {"shard_id": shard, "sample_index": index, "part_name": pa.array(names).dictionary_encode()}
    )
    expected = {
        name: len({(a, b) for a, b, c in zip(shard, index, names) if c == name}) for name in set(names)
    }
    for size in (1, 2, 7, n):  # batches cut samples anywhere; each batch has its own dictionary
        assert samples_per_part(table.to_batches(max_chunksize=size)) == expected


def test_plain_strings_and_empty():
    table = pa.table({"shard_id": pa.array([0, 0, 0], pa.int32()), "sample_index": [0, 0, 1],
                      "part_name": ["jpg", "jpg", "jpg"]})  # fmt: skip
    assert samples_per_part(table.to_batches()) == {"jpg": 2}
    assert samples_per_part([]) == {}
