"""Blending: the compiled walk and the vectorised predict/verify walk both equal the plain greedy rule."""

from __future__ import annotations

import numpy as np
import pytest

from energon_arrow.tokens.blend import blending_indices, check_not_oversampled, normalize, per_dataset_samples


def _greedy(w, size):
    counts = [0] * len(w)
    ds, inner = [], []
    for k in range(size):
        x = float(max(k, 1))
        errors = [wi * x - c for wi, c in zip(w.tolist(), counts)]
        i = int(np.argmax(errors))
        ds.append(i)
        inner.append(counts[i])
        counts[i] += 1
    return np.array(ds), np.array(inner)


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("seed", range(6))
def test_matches_the_greedy_rule(seed, compiled, monkeypatch):
    from energon_arrow.tokens import blend

    assert blend._native_blend is not None  # built by the install
    if not compiled:
        monkeypatch.setattr(blend, "_native_blend", None)
    rng = np.random.default_rng(seed)
    w = normalize(rng.random(2 + seed % 4) + 0.05)
    size = int(rng.integers(1, 20_000))
    ds, inner = blending_indices(w, size)
    want_ds, want_inner = _greedy(w, size)
    assert ds.dtype == np.int16 and inner.dtype == np.int64
    assert np.array_equal(ds, want_ds) and np.array_equal(inner, want_inner)


def test_sizes_and_errors():
    w = normalize([1, 3])
    assert per_dataset_samples(w, 1000) == [250, 750]
    assert per_dataset_samples(w, 1000, 0.005) == [252, 754]
    with pytest.raises(ValueError, match="positive"):
        normalize([0.0, 0.0])
    ds, _ = blending_indices(w, 100)
    with pytest.raises(ValueError, match="asks b"):
        check_not_oversampled(ds, [100, 10], ["a", "b"])
