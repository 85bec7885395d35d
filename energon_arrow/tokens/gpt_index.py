"""GPT sample indices identical to Megatron-Core's `GPTDataset`, built with numpy and two small compiled kernels.

Pure functions over the per-sequence token counts of a token dataset (`sequence_lengths`, int32):

- `split_bounds("969,30,1", n)`: the contiguous document ranges of the train / valid / test splits;
- `num_epochs`, `separate_final_epoch`: how many passes over the split the requested samples need, and whether the
  last pass is shuffled on its own (when it contributes < 80 % of an epoch);
- `document_index`: the split's document ids tiled once per epoch (int32) and shuffled by the shared
  `RandomState` (tokens.legacy_shuffle: numpy's permutation, compiled); `sample_index`: `[num_samples + 1, 2]`
  (position in the document index, token offset) from a running token count (one compiled pass, or numpy
  `searchsorted` in bounded chunks without the extension); `shuffle_index`: a shuffled `arange`;
- `build_gpt_indices`: all three, drawing from ONE `RandomState(seed)`: document index first, shuffle index second.

Sample `k` covers the token stream positions `[k*L, k*L + L + e)` of the documents concatenated in document-index
order (`L` sequence length, `e` = 1 when an extra token is drawn for the labels), so consecutive samples share `e`
tokens. A boundary lands in the first document whose end reaches `k*L + e`; zero-length documents never hold one.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
from numpy.random import RandomState

from energon_arrow.tokens.legacy_shuffle import shuffle

try:
    from energon_arrow.tokens._kernels import sample_boundaries as _native_boundaries
except ImportError:  # built without a C compiler: chunked numpy
    _native_boundaries = None

SPLITS = ("train", "valid", "test")
_CHUNK = 1 << 16  # document-index entries per step of the running token count (bounds the temporaries)
_INT32_MAX = np.iinfo(np.int32).max


def parse_split(split: str) -> list[float]:
    """Normalised train/valid/test weights of a split string such as "969,30,1" (missing entries are 0)."""
    values = [float(v) for v in re.findall(r"[.0-9]+", split)]
    if not values or len(values) > len(SPLITS):
        raise ValueError(f"split {split!r}: expected 1 to {len(SPLITS)} comma-separated non-negative weights")
    values += [0.0] * (len(SPLITS) - len(values))
    w = np.array(values, dtype=np.float64)
    total = np.sum(w)
    if not total > 0:
        raise ValueError(f"split {split!r}: the weights must sum to a positive number")
    return (w / total).tolist()


def split_bounds(split: str, num_documents: int) -> list[tuple[int, int] | None]:
    """[begin, end) document ids per split (None for an empty split), rounded like Megatron's split matrix."""
    cumulative = [0.0]
    for w in parse_split(split):
        cumulative.append(cumulative[-1] + w)
    out: list[tuple[int, int] | None] = []
    for lo, hi in zip(cumulative[:-1], cumulative[1:]):
        if hi <= lo:
            out.append(None)
            continue
        out.append((int(round(lo * float(num_documents))), int(round(hi * float(num_documents)))))
    return out


def num_epochs(tokens_per_epoch: int, num_samples: int | None, sequence_length: int, extra: int) -> int:
    """Smallest E with E * tokens_per_epoch >= num_samples * L + extra (1 when num_samples is None)."""
    if num_samples is None:
        return 1
    needed = num_samples * sequence_length + extra
    return max(1, -(-needed // tokens_per_epoch))


def separate_final_epoch(
    tokens_per_epoch: int, epochs: int, num_samples: int | None, sequence_length: int, extra: int
) -> bool:
    """Megatron's rule: shuffle the last epoch on its own when it contributes < int(0.8 * samples per epoch)."""
    if epochs == 1 or num_samples is None:
        return False
    sans_final = ((epochs - 1) * tokens_per_epoch - extra) // sequence_length
    from_final = num_samples - sans_final
    per_epoch = (tokens_per_epoch - extra) // sequence_length
    return from_final < int(0.80 * per_epoch)


def _lengths_of(sizes: np.ndarray, documents: np.ndarray | range) -> np.ndarray:
    """The lengths of `documents` (a view for a contiguous range, else a gather)."""
    if isinstance(documents, range) and documents.step == 1:
        return sizes[documents.start : documents.stop]
    return np.take(sizes, np.asarray(documents))


def document_index(
    sizes: np.ndarray, documents: np.ndarray | range, epochs: int, rs: RandomState, separate_final: bool
) -> tuple[np.ndarray, np.ndarray]:
    """The split's document ids repeated `epochs` times (int32), shuffled in place by `rs`; with a separate final
    epoch, the first `epochs - 1` repeats and the last one are shuffled in turn and concatenated. Also returns the
    documents' lengths in that order (`sizes[doc_index]`, an int32 view): each id is shuffled as one 8-byte item
    with its length, so the lengths come without a random gather and every swap touches one cache line."""
    if isinstance(documents, range) and documents.step == 1:
        docs = np.arange(documents.start, documents.stop, dtype=np.int32)
    else:
        docs = np.asarray(documents, dtype=np.int32)
    lengths = _lengths_of(sizes, documents)
    pairs = np.empty((epochs * docs.size, 2), dtype=np.int32)
    for e in range(epochs):
        pairs[e * docs.size : (e + 1) * docs.size, 0] = docs
        pairs[e * docs.size : (e + 1) * docs.size, 1] = lengths
    items = pairs.view(np.uint64).reshape(-1)
    if separate_final and epochs > 1:
        cut = docs.size * (epochs - 1)
        shuffle(rs, items[:cut])
        shuffle(rs, items[cut:])
    else:
        shuffle(rs, items)
    out = docs if epochs == 1 and isinstance(documents, range) else np.empty(pairs.shape[0], np.int32)
    np.copyto(out, pairs[:, 0])  # one epoch of a range: back into the ids' own (already touched) buffer
    return out, pairs[:, 1]


def count_samples(total_tokens: int, sequence_length: int, extra: int, drop_last: bool) -> int:
    """Number of samples in `total_tokens` (Megatron's helper: the partial tail sample is kept when not dropped,
    with its float32 rounding)."""
    if drop_last:
        return (total_tokens - extra) // sequence_length
    return int(math.ceil(np.float32(total_tokens - extra) / np.float32(sequence_length)))


def sample_index(
    lengths: np.ndarray,
    sequence_length: int,
    total_tokens: int,
    extra: int,
    drop_last: bool = True,
) -> np.ndarray:
    """`[num_samples + 1, 2]` boundaries (document-index position, token offset) over the document lengths in
    document-index order (int32). int32 when the document index fits in int32, else int64 (Megatron's rule; its
    other operand, the longest int32 sequence, always fits). One compiled pass when the extension is built,
    else chunked numpy (`_sample_index_numpy`); both give the same array."""
    if sequence_length < 1:
        raise ValueError(f"sequence length must be positive, got {sequence_length}")
    n = lengths.shape[0]
    dtype = np.int32 if n <= _INT32_MAX else np.int64
    num_samples = count_samples(total_tokens, sequence_length, extra, drop_last)
    if _native_boundaries is not None and lengths.dtype == np.int32 and lengths.ndim == 1:
        out = np.empty((num_samples + 1, 2), dtype=dtype)
        _native_boundaries(lengths, sequence_length, extra, out)
        return out
    return _sample_index_numpy(lengths, sequence_length, num_samples, extra, dtype)


def _sample_index_numpy(
    lengths: np.ndarray, sequence_length: int, num_samples: int, extra: int, dtype
) -> np.ndarray:
    """`sample_index` with a running token count per chunk and `searchsorted` for the boundaries in it."""
    n = lengths.shape[0]
    out = np.zeros((num_samples + 1, 2), dtype=dtype)
    k = 1  # next boundary to place; boundary k sits at stream position k*L and needs tokens up to k*L + extra
    base = 0  # tokens before the current chunk
    for c0 in range(0, n, _CHUNK):
        if k > num_samples:
            break
        chunk = lengths[c0 : c0 + _CHUNK]
        ends = np.cumsum(chunk, dtype=np.int64)  # token ends relative to the chunk start (`base` tokens in)
        last = base + int(ends[-1])
        k_hi = min(num_samples, (last - extra) // sequence_length)  # boundaries whose target is in this chunk
        if k_hi >= k:
            pos = np.arange(k, k_hi + 1, dtype=np.int64) * sequence_length - base
            local = np.searchsorted(ends, pos + extra, side="left")
            out[k : k_hi + 1, 0] = local + c0
            out[k : k_hi + 1, 1] = pos - (ends[local] - chunk[local])
            k = k_hi + 1
        base = last
    if k <= num_samples:  # the partial tail sample (drop_last=False) runs past the data: Megatron's clamp
        out[k:, 0] = n - 1
        out[k:, 1] = int(lengths[n - 1]) - extra
    return out


def shuffle_index(num_samples: int, total: int, rs: RandomState) -> np.ndarray:
    """A shuffled arange(total) (uint32, or int64 from 2**32 - 2 up); [0, num_samples) and [num_samples, total)
    are shuffled separately when they differ."""
    dtype = np.int64 if total >= np.iinfo(np.uint32).max - 1 else np.uint32
    first = np.arange(num_samples, dtype=dtype)
    shuffle(rs, first)
    if num_samples == total:
        return first
    rest = np.arange(num_samples, total, dtype=dtype)
    shuffle(rs, rest)
    return np.concatenate((first, rest))


@dataclass(frozen=True)
class GPTIndices:
    document_index: np.ndarray
    sample_index: np.ndarray
    shuffle_index: np.ndarray
    num_epochs: int
    separate_final_epoch: bool

    def __len__(self) -> int:
        return self.shuffle_index.shape[0]


def build_gpt_indices(
    sizes: np.ndarray,
    documents: np.ndarray | range,
    num_samples: int | None,
    sequence_length: int,
    seed: int,
    add_extra_token: bool = True,
    drop_last_partial: bool = True,
) -> GPTIndices:
    """The three indices of one split (`documents`: its sequence ids, a range for a contiguous split) exactly as
    GPTDataset builds them."""
    extra = 1 if add_extra_token else 0
    tokens_per_epoch = int(np.sum(_lengths_of(sizes, documents), dtype=np.int64))
    if tokens_per_epoch - extra < sequence_length:
        raise ValueError(
            f"the split holds {tokens_per_epoch} tokens, too few for one sample of sequence length "
            f"{sequence_length} (+{extra})"
        )
    epochs = num_epochs(tokens_per_epoch, num_samples, sequence_length, extra)
    separate = separate_final_epoch(tokens_per_epoch, epochs, num_samples, sequence_length, extra)
    rs = RandomState(seed)
    doc_index, lengths = document_index(sizes, documents, epochs, rs, separate)
    samples = sample_index(lengths, sequence_length, epochs * tokens_per_epoch, extra, drop_last_partial)
    del lengths
    total = samples.shape[0] - 1
    if separate:
        sans_final = ((epochs - 1) * tokens_per_epoch - extra) // sequence_length
        shuffled = shuffle_index(sans_final, total, rs)
    else:
        shuffled = shuffle_index(total, total, rs)
    return GPTIndices(doc_index, samples, shuffled, epochs, separate)
