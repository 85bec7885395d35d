"""Batched GPT sample assembly: token pieces for many samples at once, and Megatron's per-sample outputs
(tokens, labels, loss_mask, position_ids, attention_mask) computed for a whole `[B, L]` batch without per-sample
Python."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np


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
    tokens/labels come out int64 (widened in the same pass that copies them)."""
    if opts.add_extra_token:
        tokens = np.ascontiguousarray(text[:, :-1], dtype=np.int64)
        labels = np.ascontiguousarray(text[:, 1:], dtype=np.int64)
    else:
        text = text.astype(np.int64, copy=False)
        tokens = text
        labels = np.empty_like(text)
        labels[:, :-1] = text[:, 1:]
        labels[:, -1] = opts.pad_token
    b, length = tokens.shape
    cols = np.arange(length, dtype=np.int64)
    loss_mask = np.ones((b, length), dtype=np.float32)
    eod = None if opts.eod_token is None else tokens == opts.eod_token
    if opts.eod_mask_loss:
        loss_mask[eod] = 0.0
    if opts.reset_position_ids or opts.reset_attention_mask:
        # a document restarts after each EOD: the start of a token's document is one past the last EOD before it
        marks = np.zeros((b, length), dtype=np.int64)
        marks[:, 1:] = np.where(eod[:, :-1], cols[1:], 0)
        doc_start = np.maximum.accumulate(marks, axis=1)
    position_ids = np.broadcast_to(cols, (b, length)).copy()
    if opts.reset_position_ids:
        position_ids -= doc_start
    out = {"tokens": tokens, "labels": labels}
    if opts.create_attention_mask:
        if opts.reset_attention_mask:
            allowed = ~causal_mask(length)[None] & (cols[None, None, :] >= doc_start[:, :, None])
            out["attention_mask"] = ~allowed[:, None]  # True = masked, as Megatron returns it
        else:  # the same mask for every row and batch: a broadcast view of one cached read-only mask
            out["attention_mask"] = np.broadcast_to(causal_mask(length), (b, 1, length, length))
    padded = labels == opts.pad_token
    if padded.any():  # rarely: skip two more passes when no pad id occurs
        loss_mask[padded] = 0.0
        labels[padded] = 0
        tokens[tokens == opts.pad_token] = 0
    out["loss_mask"] = loss_mask
    out["position_ids"] = position_ids
    return out


@lru_cache(maxsize=8)
def causal_mask(length: int) -> np.ndarray:
    """Megatron's `[L, L]` causal attention mask (True = masked: key after query), built once per length and
    read-only (shared by every batch)."""
    cols = np.arange(length)
    mask = cols[None, :] > cols[:, None]
    mask.flags.writeable = False
    return mask
