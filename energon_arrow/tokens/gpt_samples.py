"""Batched GPT sample assembly: token pieces for many samples at once, and Megatron's per-sample outputs
(tokens, labels, loss_mask, position_ids, attention_mask) computed for a whole `[B, L]` batch without per-sample
Python."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

try:
    from energon_arrow.tokens._kernels import gather_samples as _native_gather
except ImportError:  # built without a C compiler: sample_pieces + a vectorised numpy gather
    _native_gather = None


def gather_rows_native(
    tokens: np.ndarray | None,
    pointers: np.ndarray,
    sizes: np.ndarray,
    document_index: np.ndarray,
    sample_index: np.ndarray,
    sample_ids: np.ndarray,
    extra: int,
    width: int,
) -> np.ndarray | None:
    """`[B, width]` token rows of samples `sample_ids` copied straight out of the memory-mapped .bin `tokens` by
    the compiled gather (one memcpy per piece, no index arrays). None when it does not apply (no compiled
    extension, a remote dataset, a short row that needs padding, or an index entry out of range): the caller
    takes the numpy path, which pads short rows and raises IndexError on a corrupt index."""
    if _native_gather is None or tokens is None:
        return None
    out = np.empty((sample_ids.size, width), tokens.dtype)
    try:
        shortest = _native_gather(
            tokens,
            pointers,
            sizes,
            np.ascontiguousarray(document_index, dtype=np.int32),
            np.ascontiguousarray(sample_index),
            np.ascontiguousarray(sample_ids, dtype=np.int64),
            extra,
            out,
        )
    except IndexError:  # a corrupt index: the numpy path reports it with numpy's message (or pads, see above)
        return None
    return out if shortest == width else None


def sample_pieces(
    sample_ids: np.ndarray,
    sample_index: np.ndarray,
    document_index: np.ndarray,
    sizes: np.ndarray,
    extra: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(sequence ids, offsets, lengths, pieces per sample) of the token pieces that make up each sample, in
    order: from (doc position, offset) of boundary j to boundary j+1, the last piece running `extra` tokens on."""
    beg = sample_index[sample_ids].astype(np.int64)
    end = sample_index[sample_ids + 1].astype(np.int64)
    counts = end[:, 0] - beg[:, 0] + 1
    first = np.zeros(counts.size, np.int64)
    np.cumsum(counts[:-1], out=first[1:])
    owner = np.repeat(np.arange(counts.size), counts)
    step = np.arange(owner.size, dtype=np.int64) - first[owner]
    seq = document_index[beg[owner, 0] + step].astype(np.int64)
    is_first = step == 0
    is_last = step == counts[owner] - 1
    offsets = np.where(is_first, beg[owner, 1], 0)
    lengths = np.where(is_last, end[owner, 1] + extra, sizes[seq].astype(np.int64)) - offsets
    return seq, offsets, lengths, counts


def rows_from_pieces(
    flat: np.ndarray, lengths: np.ndarray, counts: np.ndarray, width: int, pad: int
) -> np.ndarray:
    """The concatenated pieces laid out as `[B, width]` int64 rows, short rows padded with `pad`."""
    b = counts.size
    owner = np.repeat(np.arange(b), counts)
    per_row = np.bincount(owner, weights=lengths, minlength=b).astype(np.int64)
    out = np.full((b, width), pad, dtype=np.int64)
    row_start = np.zeros(b, np.int64)
    np.cumsum(per_row[:-1], out=row_start[1:])
    rows = np.repeat(np.arange(b), per_row)
    out[rows, np.arange(flat.size) - row_start[rows]] = flat
    return out


@dataclass(frozen=True)
class MaskOptions:
    eod_token: int | None
    pad_token: int
    reset_position_ids: bool
    reset_attention_mask: bool
    eod_mask_loss: bool
    create_attention_mask: bool
    add_extra_token: bool


def gpt_batch(text: np.ndarray, opts: MaskOptions) -> dict[str, np.ndarray]:
    """Megatron GPTDataset outputs for integer rows of `text` ([B, L+1] with the extra token, else [B, L]);
    tokens/labels come out int64 (widened in the same pass that copies them).

    Outputs that are the same for every row come back as read-only broadcast views (batch stride 0) of one
    cached row: position_ids (arange) without reset_position_ids, loss_mask (ones) when nothing is masked, and the
    causal attention_mask without reset_attention_mask. They cost no memory per batch; clone one to edit it."""
    if opts.add_extra_token:
        tokens = np.ascontiguousarray(text[:, :-1], dtype=np.int64)
        labels = np.ascontiguousarray(text[:, 1:], dtype=np.int64)
    else:
        tokens = text.astype(np.int64)  # a copy even when already int64: rows may be shared with `text`
        labels = np.empty_like(tokens)
        labels[:, :-1] = tokens[:, 1:]
        labels[:, -1] = opts.pad_token
    b, length = tokens.shape
    cols = np.arange(length, dtype=np.int64)
    uses_eod = opts.eod_mask_loss or opts.reset_position_ids or opts.reset_attention_mask
    eod = tokens == opts.eod_token if uses_eod else None
    if opts.reset_position_ids or opts.reset_attention_mask:
        # a document restarts after each EOD: the start of a token's document is one past the last EOD before it
        marks = np.zeros((b, length), dtype=np.int64)
        marks[:, 1:] = np.where(eod[:, :-1], cols[1:], 0)
        doc_start = np.maximum.accumulate(marks, axis=1)
    out = {"tokens": tokens, "labels": labels}
    if opts.create_attention_mask:
        if opts.reset_attention_mask:
            allowed = ~causal_mask(length)[None] & (cols[None, None, :] >= doc_start[:, :, None])
            out["attention_mask"] = ~allowed[:, None]  # True = masked, as Megatron returns it
        else:
            out["attention_mask"] = np.broadcast_to(causal_mask(length), (b, 1, length, length))
    # pad ids only occur when the pad id is a possible token (Megatron's default -1 never is in unsigned
    # data) or when rows were padded/shifted in; then they are zeroed and masked like Megatron does
    padded = labels == opts.pad_token if _pad_possible(text, opts) else None
    if padded is not None and not padded.any():
        padded = None
    if opts.eod_mask_loss or padded is not None:
        loss_mask = np.ones((b, length), dtype=np.float32)
        if opts.eod_mask_loss:
            loss_mask[eod] = 0.0
        if padded is not None:
            loss_mask[padded] = 0.0
            labels[padded] = 0
            tokens[tokens == opts.pad_token] = 0
    else:
        loss_mask = np.broadcast_to(shared_row("loss_mask", length), (b, length))
    out["loss_mask"] = loss_mask
    if opts.reset_position_ids:
        out["position_ids"] = cols - doc_start
    else:
        out["position_ids"] = np.broadcast_to(shared_row("position_ids", length), (b, length))
    return out


def _pad_possible(text: np.ndarray, opts: MaskOptions) -> bool:
    """Whether labels can hold the pad id: always after padding or the no-extra-token shift, else only when the
    pad id is within the token dtype's range."""
    if not opts.add_extra_token or not np.issubdtype(text.dtype, np.integer):
        return True
    info = np.iinfo(text.dtype)
    return info.min <= opts.pad_token <= info.max


@lru_cache(maxsize=16)
def shared_row(name: str, length: int) -> np.ndarray:
    """The read-only row that `gpt_batch` broadcasts for `name`: position_ids (int64 arange) or loss_mask
    (float32 ones)."""
    row = np.arange(length, dtype=np.int64) if name == "position_ids" else np.ones(length, dtype=np.float32)
    row.flags.writeable = False
    return row


@lru_cache(maxsize=8)
def causal_mask(length: int) -> np.ndarray:
    """Megatron's `[L, L]` causal attention mask (True = masked: key after query), built once per length and
    read-only (shared by every batch)."""
    cols = np.arange(length)
    mask = cols[None, :] > cols[:, None]
    mask.flags.writeable = False
    return mask
