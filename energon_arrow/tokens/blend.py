"""Blending several datasets exactly like Megatron-Core's `BlendedDataset`: one compiled greedy walk
(`kernels/blend.c`) when the extension is built, else the vectorised numpy walk below.

Megatron's rule is a greedy walk: sample k goes to the dataset i with the largest error
`w_i * max(k, 1) - count_i` (float64, the first dataset wins ties), and `dataset_sample_index[k]` is how many
samples that dataset had before. We reproduce it with "predict, verify, commit": a window of choices is predicted
by merging each dataset's next due times `(count_i + m + 1/2) / w_i`, then the greedy rule is evaluated for the whole
window at once from the counts the prediction implies. Every step up to the first disagreement is exactly the
greedy's choice (by induction), and so is the greedy's choice at the disagreement itself; those are committed and
the next window starts there. Two datasets are predicted almost perfectly (whole windows commit at once). With three
or more, the max-error rule often departs from the due-time order; when a window commits fewer than
`_SCALAR_BELOW` steps, the next `_SCALAR_RUN` steps are taken by a scalar loop of the same rule (same float64
operations, so still exact) before predicting again.
"""

from __future__ import annotations

import math

import numpy as np

try:
    from energon_arrow.tokens._kernels import blending_indices as _native_blend
except ImportError:  # built without a C compiler: the numpy walk
    _native_blend = None

_MIN_WINDOW = 64
_MAX_WINDOW = 1 << 18
_SCALAR_BELOW = 32
_SCALAR_RUN = 4096


def normalize(weights) -> np.ndarray:
    """Weights divided by their sum (float64), rejecting weights that are not positive finite numbers."""
    w = np.asarray(weights, dtype=np.float64).reshape(-1)
    if w.size == 0:
        raise ValueError("a blend needs at least one weight")
    if not np.isfinite(w).all() or (w <= 0).any():
        raise ValueError(f"blend weights must be positive finite numbers, got {w.tolist()}")
    return w / np.sum(w)


def per_dataset_samples(weights: np.ndarray, size: int, surplus: float = 0.0) -> list[int]:
    """Samples to build per dataset for a blend of `size` samples: ceil(ceil(size * w) * (1 + surplus))."""
    return [int(math.ceil(math.ceil(size * float(w)) * (1 + surplus))) for w in weights]


def _predict(w: np.ndarray, counts: np.ndarray, window: int) -> np.ndarray:
    """A guess of the next `window` choices: each dataset's upcoming picks merged by due time."""
    keys, owners = [], []
    for i, wi in enumerate(w.tolist()):
        m = np.arange(int(math.ceil(wi * window)) + 2, dtype=np.float64)
        keys.append((counts[i] + m + 0.5) / wi)
        owners.append(np.full(m.size, i, dtype=np.int64))
    key = np.concatenate(keys)
    order = np.argsort(key, kind="stable")[:window]
    return np.concatenate(owners)[order]


def blending_indices(weights, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(dataset_index int16, dataset_sample_index int64) of length `size` for normalised `weights`."""
    w = np.asarray(weights, dtype=np.float64).reshape(-1)
    d = w.size
    if d >= 32767:
        raise ValueError(f"a blend holds at most 32766 datasets, got {d}")
    dataset_index = np.empty(size, dtype=np.int16)
    dataset_sample_index = np.empty(size, dtype=np.int64)
    if _native_blend is not None:
        _native_blend(np.ascontiguousarray(w), dataset_index, dataset_sample_index)
        return dataset_index, dataset_sample_index
    counts = np.zeros(d, dtype=np.int64)
    k = 0
    window = 1024
    while k < size:
        n = min(window, size - k)
        guess = _predict(w, counts, n)
        onehot = np.zeros((d, n), dtype=np.int64)
        onehot[guess, np.arange(n)] = 1
        before = np.cumsum(onehot, axis=1) - onehot + counts[:, None]  # counts before each step, per dataset
        steps = np.maximum(np.arange(k, k + n, dtype=np.float64), 1.0)
        error = w[:, None] * steps[None, :] - before.astype(np.float64)
        choice = np.argmax(error, axis=0)  # first maximum, like the strict '>' scan
        wrong = np.flatnonzero(choice != guess)
        good = n if wrong.size == 0 else int(wrong[0]) + 1
        chosen = choice[:good]
        dataset_index[k : k + good] = chosen
        dataset_sample_index[k : k + good] = before[chosen, np.arange(good)]
        counts += np.bincount(chosen, minlength=d)
        k += good
        window = min(_MAX_WINDOW, window * 2) if wrong.size == 0 else max(_MIN_WINDOW, 2 * good)
        if good < _SCALAR_BELOW and k < size:
            run = min(_SCALAR_RUN, size - k)
            _scalar_steps(w, counts, k, run, dataset_index, dataset_sample_index)
            k += run
    return dataset_index, dataset_sample_index


def _scalar_steps(w: np.ndarray, counts: np.ndarray, k: int, n: int, out_ds, out_sample) -> None:
    """`n` greedy steps from step `k`, one at a time (the float64 arithmetic of the vectorised check)."""
    weights = w.tolist()
    c = counts.tolist()
    picks = []
    for step in range(k, k + n):
        x = float(max(step, 1))
        best, best_err = 0, weights[0] * x - c[0]
        for i in range(1, len(weights)):
            err = weights[i] * x - c[i]
            if err > best_err:
                best, best_err = i, err
        picks.append((best, c[best]))
        c[best] += 1
    arr = np.array(picks, dtype=np.int64).reshape(-1, 2)
    out_ds[k : k + n] = arr[:, 0]
    out_sample[k : k + n] = arr[:, 1]
    counts[:] = c


def check_not_oversampled(dataset_index: np.ndarray, lengths: list[int], names: list[str]) -> None:
    """Megatron's guard: no dataset may be asked for more samples than it has."""
    counts = np.bincount(dataset_index.astype(np.int64), minlength=len(lengths))
    for i, (want, have) in enumerate(zip(counts.tolist(), lengths)):
        if want > have:
            raise ValueError(
                f"the blend asks {names[i]} (dataset {i}) for {want} samples but it has {have}; "
                f"raise the surplus of samples built per dataset"
            )
