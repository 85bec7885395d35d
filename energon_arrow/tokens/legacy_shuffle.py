"""`shuffle(rs, array)`: exactly `rs.shuffle(array)` for a numpy legacy `RandomState`, through the compiled
prefetching loop (`kernels/legacy_shuffle.c`) when it was built and applies (contiguous 1-D arrays of 4- or
8-byte items, fewer than 2**32 of them), else through numpy itself. Both give the same permutation and leave `rs`
in the same state; the compiled loop is 3-5x faster."""

from __future__ import annotations

import numpy as np
from numpy.random import RandomState

try:
    from energon_arrow.tokens._kernels import legacy_shuffle as _native
except ImportError:  # built without a C compiler: numpy's own loop
    _native = None

NATIVE_AVAILABLE = _native is not None


def _native_applies(array: np.ndarray) -> bool:
    return (
        _native is not None
        and array.ndim == 1
        and array.flags.c_contiguous
        and array.flags.writeable
        and array.dtype.itemsize in (4, 8)
        and array.shape[0] < 1 << 32
    )


def shuffle(rs: RandomState, array: np.ndarray) -> None:
    """Shuffle `array` in place, drawing from `rs` exactly as `rs.shuffle(array)` does."""
    if not _native_applies(array):
        rs.shuffle(array)
        return
    name, key, pos, has_gauss, gauss = rs.get_state(legacy=True)
    key = np.ascontiguousarray(key, dtype=np.uint32)
    pos = _native(array, key, int(pos))
    rs.set_state((name, key, pos, has_gauss, gauss))
