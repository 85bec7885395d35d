"""Nanoset: Megatron-Core GPTDataset / BlendedDataset samples, in the same order, over `.bin/.idx` token files.

    config = NanosetConfig(paths=["/data/web_text_document"], sequence_length=2048, seed=1234, split="969,30,1",
                           eod_token=tokenizer.eod)
    train, valid, test = NanosetBuilder(config).build([num_train, num_valid, num_test])
    train[k]                     # Megatron's dict of tensors for sample k
    train.get_batch([k0, k1])    # the same fields stacked [B, L]; one vectorised read per token file

Index construction is in tokens.gpt_index (single dataset) and tokens.blend (blends); caching and distribution
in tokens.nanoset_cache; batch assembly in tokens.gpt_samples.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from energon_arrow.tokens.blend import (
    blending_indices,
    check_not_oversampled,
    normalize,
    per_dataset_samples,
)
from energon_arrow.tokens.gpt_index import SPLITS, GPTIndices, build_gpt_indices, parse_split, split_bounds
from energon_arrow.tokens.gpt_samples import (
    MaskOptions,
    causal_mask,
    gather_rows_native,
    gpt_batch,
    rows_from_pieces,
    sample_pieces,
    shared_row,
)
from energon_arrow.tokens.indexed import IndexedTokens, wrap_indices
from energon_arrow.tokens.nanoset_cache import IndexCache, digest, obtain

INDEX_VERSION = 1


@dataclass(frozen=True)
class NanosetConfig:
    """Settings of a Nanoset (names follow Megatron's GPTDatasetConfig where one exists).

    paths: token dataset prefixes (no .bin/.idx suffix; local or s3://); several make a blend with `weights`.
    split: train/valid/test weights over each dataset's sequences, contiguous ("969,30,1").
    eod_token: the tokenizer's end-of-document id (needed by eod_mask_loss and the reset options).
    pad_token: Megatron's pad id (-1 when the tokenizer has none); labels/tokens equal to it are zeroed and masked.
    cache_dir: node-local index cache (default ~/.cache/energon-arrow/nanoset or $ENERGON_ARROW_CACHE/nanoset).
    """

    paths: Sequence[str]
    sequence_length: int
    seed: int = 1234
    weights: Sequence[float] | None = None
    split: str = "969,30,1"
    add_extra_token: bool = True
    eod_token: int | None = None
    pad_token: int = -1
    reset_position_ids: bool = False
    reset_attention_mask: bool = False
    eod_mask_loss: bool = False
    create_attention_mask: bool = True
    drop_last_partial_validation_sequence: bool = True
    mid_level_dataset_surplus: float = 0.005
    cache_dir: str | None = None
    allow_rebuild_on_change: bool = False
    storage_options: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.paths, str):
            object.__setattr__(self, "paths", [self.paths])
        if not self.paths:
            raise ValueError("NanosetConfig.paths: at least one token dataset prefix is needed")
        if int(self.sequence_length) < 1:
            raise ValueError(f"sequence_length must be positive, got {self.sequence_length}")
        if self.weights is not None and len(self.weights) != len(self.paths):
            raise ValueError(f"{len(self.weights)} weights for {len(self.paths)} token datasets")
        if self.weights is None and len(self.paths) > 1:
            raise ValueError("a blend of several token datasets needs weights")
        if self.weights is not None:
            normalize(self.weights)  # rejects non-positive weights now
        uses_eod = self.eod_mask_loss or self.reset_position_ids or self.reset_attention_mask
        if uses_eod and self.eod_token is None:
            raise ValueError("eod_mask_loss / reset_position_ids / reset_attention_mask need eod_token")

    def mask_options(self) -> MaskOptions:
        return MaskOptions(
            self.eod_token,
            self.pad_token,
            self.reset_position_ids,
            self.reset_attention_mask,
            self.eod_mask_loss,
            self.create_attention_mask,
            self.add_extra_token,
        )


class Nanoset:
    """One split of one token dataset: GPTDataset's indices and samples."""

    def __init__(self, tokens: IndexedTokens, indices: GPTIndices, config: NanosetConfig, split: str):
        self.tokens = tokens
        self.indices = indices
        self.config = config
        self.split = split
        # plain ndarray views of the (possibly memory-mapped) cached arrays: np.memmap indexing costs Python
        self.document_index = np.asarray(indices.document_index)
        self.sample_index = np.asarray(indices.sample_index)
        self.shuffle_index = np.asarray(indices.shuffle_index)
        self._extra = 1 if config.add_extra_token else 0
        self._opts = config.mask_options()

    def __len__(self) -> int:
        return self.shuffle_index.shape[0]

    def __repr__(self) -> str:
        return f"Nanoset({self.tokens.path_prefix!r}, split={self.split}, samples={len(self)})"

    def _check(self, ks: np.ndarray) -> np.ndarray:
        n = len(self)
        return wrap_indices(ks, n, lambda bad: f"sample {bad} out of range for {n} samples of {self!r}")

    def text(self, ks) -> np.ndarray:
        """`[B, L + extra]` int64 token rows of samples `ks`, gathered with one vectorised read."""
        return self._rows(ks).astype(np.int64, copy=False)

    def _rows(self, ks) -> np.ndarray:
        """`text(ks)`, left in the token file's dtype when no row needs padding (saves a widening pass)."""
        ks = self._check(np.asarray(ks, dtype=np.int64).reshape(-1))
        width = self.config.sequence_length + self._extra
        if ks.size == 0:
            return np.zeros((0, width), np.int64)
        ids = self.shuffle_index[ks].astype(np.int64)
        tokens = self.tokens
        rows = gather_rows_native(
            tokens.local_tokens,
            tokens.sequence_pointers,
            tokens.sequence_lengths,
            self.document_index,
            self.sample_index,
            ids,
            self._extra,
            width,
        )
        if rows is not None:
            return rows
        seq, offsets, lengths, counts = sample_pieces(
            ids, self.sample_index, self.document_index, self.tokens.sequence_lengths, self._extra
        )
        flat = self.tokens.get_many(seq, offsets, lengths)
        if flat.size == ks.size * width:
            return flat.reshape(ks.size, width)
        return rows_from_pieces(flat, lengths, counts, width, self.config.pad_token)

    def get_batch(self, ks) -> dict:
        """Megatron's sample fields for samples `ks`, stacked: tokens/labels/position_ids [B, L] int64,
        loss_mask [B, L] float32, attention_mask [B, 1, L, L] bool (True = masked) when configured; without
        reset_attention_mask it is one cached causal mask expanded over the batch (read it, or clone it to edit)."""
        return _to_torch(gpt_batch(self._rows(ks), self._opts))

    def __getitem__(self, k) -> dict:
        return _single(self.get_batch([k]))


class BlendedNanoset:
    """Several Nanosets mixed like Megatron's BlendedDataset (samples carry their `dataset_id`)."""

    def __init__(self, datasets: list[Nanoset], dataset_index: np.ndarray, dataset_sample_index: np.ndarray):
        self.datasets = datasets
        self.dataset_index = dataset_index
        self.dataset_sample_index = dataset_sample_index
        self.split = datasets[0].split

    def __len__(self) -> int:
        return self.dataset_index.shape[0]

    def __repr__(self) -> str:
        return f"BlendedNanoset({len(self.datasets)} datasets, split={self.split}, samples={len(self)})"

    def text(self, ks) -> tuple[np.ndarray, np.ndarray]:
        """(`[B, L + extra]` token rows, dataset ids) with one vectorised read per contributing dataset."""
        ks = np.asarray(ks, dtype=np.int64).reshape(-1)
        n = len(self)
        ks = wrap_indices(ks, n, lambda bad: f"sample {bad} out of range for {n} samples of {self!r}")
        which = self.dataset_index[ks].astype(np.int64)
        inner = self.dataset_sample_index[ks]
        width = self.datasets[0].config.sequence_length + self.datasets[0]._extra
        rows = np.empty((ks.size, width), np.int64)
        for d in np.unique(which).tolist():
            sel = which == d
            rows[sel] = self.datasets[d].text(inner[sel])
        return rows, which

    def get_batch(self, ks) -> dict:
        rows, which = self.text(ks)
        out = gpt_batch(rows, self.datasets[0]._opts)
        out = {"dataset_id": which.astype(np.int16), **out}
        return _to_torch(out)

    def __getitem__(self, k) -> dict:
        return _single(self.get_batch([k]))


def _single(batch: dict) -> dict:
    """Sample 0 of a batch. The fields gpt_batch may broadcast from one cached row are cloned: a sample owns its
    tensors as Megatron's samples do."""
    return {key: value[0].clone() if key in _MAYBE_SHARED else value[0] for key, value in batch.items()}


_MAYBE_SHARED = frozenset({"attention_mask", "position_ids", "loss_mask"})


def _to_torch(batch: dict[str, np.ndarray]) -> dict:
    import torch

    out = {}
    for k, v in batch.items():
        if v.ndim and v.strides[0] == 0 and v.shape[0]:  # gpt_batch's broadcast of one cached row
            out[k] = _shared_tensor(k, v.shape[1:]).expand(v.shape)
        else:
            out[k] = torch.from_numpy(np.ascontiguousarray(v))
    return out


@lru_cache(maxsize=16)
def _shared_tensor(name: str, shape: tuple[int, ...]):
    """`[1, *shape]` torch twin of the row gpt_batch broadcasts for `name` (causal attention mask, position_ids,
    loss_mask), made once and expanded over every batch. Writing into the expanded tensor raises in torch;
    clone it to edit."""
    import torch

    row = causal_mask(shape[-1])[None] if name == "attention_mask" else shared_row(name, shape[-1])
    return torch.from_numpy(np.array(row))[None]


class NanosetBuilder:
    """Builds the train/valid/test Nanosets of a config (call on every rank under torch.distributed)."""

    def __init__(self, config: NanosetConfig):
        self.config = config
        self.cache = IndexCache(config.cache_dir)
        self.tokens = [IndexedTokens(p, config.storage_options) for p in config.paths]
        dtypes = {t.dtype for t in self.tokens}
        if len(dtypes) > 1:
            listing = ", ".join(f"{t.path_prefix}: {t.dtype}" for t in self.tokens)
            raise ValueError(f"the token datasets of a blend must share one dtype, got {listing}")
        # the token files' identities (size, mtime, ETag) key the cached indices: read once (HEADs on S3)
        self.identities = [
            {t.bin_url: t.storage.stat(t.bin_name).identity, t.idx_url: t.storage.stat(t.idx_name).identity}
            for t in self.tokens
        ]

    def build(self, num_samples: Sequence[int | None]) -> list[Nanoset | BlendedNanoset | None]:
        """One dataset per split (None for splits with zero weight); `num_samples[i]` samples for split i
        (None: one epoch of a single dataset)."""
        sizes = list(num_samples) + [None] * (len(SPLITS) - len(num_samples))
        cfg = self.config
        if len(self.tokens) == 1 and cfg.weights is None:
            return [self._split_dataset(0, i, sizes[i]) for i in range(len(SPLITS))]
        weights = normalize(cfg.weights)
        out: list = []
        for i, name in enumerate(SPLITS):
            if parse_split(cfg.split)[i] == 0:
                out.append(None)
                continue
            if sizes[i] is None:
                raise ValueError(f"a blend needs the number of {name} samples (num_samples[{i}])")
            buffered = per_dataset_samples(weights, sizes[i], cfg.mid_level_dataset_surplus)
            target = sum(per_dataset_samples(weights, sizes[i]))
            parts = [self._split_dataset(d, i, buffered[d]) for d in range(len(self.tokens))]
            out.append(self._blend(parts, normalize(weights), target, i))
        return out

    def _split_dataset(self, d: int, split: int, num_samples: int | None) -> Nanoset | None:
        cfg = self.config
        tokens = self.tokens[d]
        bounds = split_bounds(cfg.split, len(tokens))[split]
        if bounds is None:
            return None
        name = SPLITS[split]
        beg, end = bounds
        if end <= beg:
            raise ValueError(
                f"{tokens.path_prefix}: the {name} split ({cfg.split!r}) holds no documents "
                f"of the {len(tokens)} sequences"
            )
        drop_last = cfg.drop_last_partial_validation_sequence if name == "valid" else True
        settings = {
            "kind": "gpt",
            "version": INDEX_VERSION,
            "path": tokens.path_prefix,
            "split": name,
            "split_weights": cfg.split,
            "num_samples": num_samples,
            "sequence_length": cfg.sequence_length,
            "seed": cfg.seed,
            "add_extra_token": cfg.add_extra_token,
            "drop_last_partial": drop_last,
        }

        def build() -> dict[str, np.ndarray]:
            try:
                idx = build_gpt_indices(
                    tokens.sequence_lengths,
                    range(beg, end),
                    num_samples,
                    cfg.sequence_length,
                    cfg.seed,
                    cfg.add_extra_token,
                    drop_last,
                )
            except ValueError as exc:
                raise ValueError(f"{tokens.path_prefix} ({name} split): {exc}") from None
            return {
                "document_index": idx.document_index,
                "sample_index": idx.sample_index,
                "shuffle_index": idx.shuffle_index,
                "epochs": np.array([idx.num_epochs, int(idx.separate_final_epoch)], np.int64),
            }

        arrays = obtain(
            self.cache, digest(settings), self.identities[d], settings, build, cfg.allow_rebuild_on_change
        )
        epochs, separate = arrays["epochs"].tolist()
        indices = GPTIndices(
            arrays["document_index"], arrays["sample_index"], arrays["shuffle_index"], epochs, bool(separate)
        )
        return Nanoset(tokens, indices, cfg, name)

    def _blend(self, parts: list[Nanoset], weights: np.ndarray, size: int, split: int) -> BlendedNanoset:
        cfg = self.config
        files = {url: ident for identity in self.identities for url, ident in identity.items()}
        settings = {
            "kind": "blend",
            "version": INDEX_VERSION,
            "parts": [{"path": p.tokens.path_prefix, "samples": len(p)} for p in parts],
            "split": SPLITS[split],
            "weights": weights.tolist(),
            "size": size,
        }

        def build() -> dict[str, np.ndarray]:
            dataset_index, dataset_sample_index = blending_indices(weights, size)
            check_not_oversampled(
                dataset_index, [len(p) for p in parts], [p.tokens.path_prefix for p in parts]
            )
            return {"dataset_index": dataset_index, "dataset_sample_index": dataset_sample_index}

        arrays = obtain(self.cache, digest(settings), files, settings, build, cfg.allow_rebuild_on_change)
        return BlendedNanoset(parts, arrays["dataset_index"], arrays["dataset_sample_index"])
