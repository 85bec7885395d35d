"""Megatron-Core reference objects for the Nanoset conformance tests (test-only: imports megatron.core)."""

from __future__ import annotations

import logging
import warnings

import numpy as np

from energon_arrow.tokens.builder import TokenWriter


def write_tokens(prefix: str, lengths, seed: int, dtype=np.uint16, vocab: int = 1000) -> np.ndarray:
    """A token file with one sequence per document of the given lengths (0 allowed); returns the tokens."""
    lengths = np.asarray(lengths, dtype=np.int64)
    tokens = np.random.default_rng(seed).integers(0, vocab, size=int(lengths.sum())).astype(dtype)
    with TokenWriter(prefix, dtype=dtype) as w:
        w.add_documents(tokens, lengths)
        w.finalize()
    return tokens


def megatron():
    """Import megatron-core quietly with multistorageclient off (it reroutes local I/O)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.getLogger("megatron").setLevel(logging.ERROR)
        from megatron.core.datasets import blended_megatron_dataset_builder as builder
        from megatron.core.datasets import gpt_dataset
        from megatron.core.msc_utils import MultiStorageClientFeature
        from megatron.core.tokenizers.text.libraries.null_tokenizer import NullTokenizer

        MultiStorageClientFeature.disable()
    return builder, gpt_dataset, NullTokenizer


def megatron_datasets(
    prefixes,
    weights,
    sizes,
    *,
    sequence_length: int,
    seed: int,
    split: str,
    cache: str,
    add_extra_token: bool = True,
    vocab: int = 1000,
    **options,
):
    """Megatron's train/valid/test datasets (GPTDataset, or BlendedDataset for blends) for the same settings."""
    builder, gpt, null_tokenizer = megatron()
    blend = (list(prefixes), None if weights is None else list(weights))
    config = gpt.GPTDatasetConfig(
        random_seed=seed,
        sequence_length=sequence_length,
        blend=blend,
        split=split,
        # BlendedDataset asks torch.distributed for the rank when it writes a cache: skip its cache for blends
        path_to_cache=cache if len(prefixes) == 1 else None,
        tokenizer=null_tokenizer(vocab_size=vocab),
        reset_position_ids=options.get("reset_position_ids", False),
        reset_attention_mask=options.get("reset_attention_mask", False),
        eod_mask_loss=options.get("eod_mask_loss", False),
        create_attention_mask=options.get("create_attention_mask", False),
        add_extra_token_to_sequence=add_extra_token,
    )
    return builder.BlendedMegatronDatasetBuilder(gpt.GPTDataset, list(sizes), lambda: True, config).build()
