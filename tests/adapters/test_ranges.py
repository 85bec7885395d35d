"""Range coalescing: pure arithmetic, checked with hypothesis against a byte-level model."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from energon_arrow.adapters.ranges import coalesce_ranges, split_fetched

DATA = np.random.default_rng(0).bytes(1 << 16)

ranges = st.lists(
    st.tuples(st.integers(0, (1 << 16) - 1), st.integers(0, 3000)).map(
        lambda t: (t[0], min(t[1], (1 << 16) - t[0]))
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(ranges, st.integers(0, 5000), st.sampled_from([0, 1, 100, 4096, 1 << 20]))
def test_coalesce_properties(reqs, gap, max_fetch):
    offsets = np.array([o for o, _ in reqs], np.int64)
    sizes = np.array([s for _, s in reqs], np.int64)
    plan = coalesce_ranges(offsets, sizes, gap, max_fetch)
    n, g = len(reqs), plan.starts.size
    assert plan.group.shape == plan.inner.shape == (n,)
    assert g <= n and (n == 0) == (g == 0)
    assert (plan.starts <= plan.ends).all()
    assert (np.diff(plan.starts) >= 0).all()
    # every request lies inside its fetch
    assert (plan.starts[plan.group] + plan.inner == offsets).all()
    assert (offsets + sizes <= plan.ends[plan.group]).all()
    # every fetch is the hull of its requests: no byte fetched before the first or after the last request
    if n:
        assert (np.bincount(plan.group, minlength=g) > 0).all()
        first = np.full(g, np.iinfo(np.int64).max)
        np.minimum.at(first, plan.group, offsets)
        last = np.zeros(g, np.int64)
        np.maximum.at(last, plan.group, offsets + sizes)
        assert (first == plan.starts).all() and (last == plan.ends).all()
    # the cap: request starts within one fetch lie within max_fetch bytes
    if max_fetch and n:
        assert (offsets - plan.starts[plan.group] < max_fetch).all()
    # without a binding cap, separate fetches are more than `gap` apart
    if max_fetch == 0 and g > 1:
        assert (plan.starts[1:] > np.maximum.accumulate(plan.ends)[:-1] + gap).all()
    # splitting the fetched bytes gives every request its bytes, in request order
    fetched = [DATA[s:e] for s, e in zip(plan.starts.tolist(), plan.ends.tolist())]
    out = split_fetched(fetched, plan, sizes)
    assert [bytes(v) for v in out] == [DATA[o : o + s] for o, s in reqs]


def test_mostly_gap_fetches_are_copied_out():
    plan = coalesce_ranges([0, 900], [10, 10], max_gap=1000)
    fetched = [DATA[:910]]
    views = split_fetched(fetched, plan, [10, 10])
    assert all(v.obj is not fetched[0] for v in views)  # own copies: the 910-byte fetch can be freed
    plan = coalesce_ranges([0, 10], [10, 10], max_gap=1000)
    dense = split_fetched([DATA[:20]], plan, [10, 10])
    assert all(v.obj is not None for v in dense) and bytes(dense[1]) == DATA[10:20]


def test_capping_is_vectorised_for_many_requests():
    n = 200_000
    offsets = np.arange(n, dtype=np.int64) * 100
    plan = coalesce_ranges(offsets, np.full(n, 100), max_gap=0, max_fetch=1 << 20)
    assert plan.starts.size == -(-n * 100 // (1 << 20))
    assert (plan.ends - plan.starts <= (1 << 20) + 100).all()  # the cap plus the longest request


def test_bad_ranges():
    with pytest.raises(ValueError, match="non-negative"):
        coalesce_ranges([-1], [1])
    with pytest.raises(ValueError, match="equal length"):
        coalesce_ranges([1, 2], [1])
    with pytest.raises(EOFError, match="beyond the 5 bytes fetched"):
        split_fetched([b"12345"], coalesce_ranges([0], [10]), [10])
