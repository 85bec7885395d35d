"""preprocess output read by megatron-core's IndexedDataset: every document is tokenizer(text) (+ EOD)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from energon_arrow.tokens.preprocess import PreprocessOptions, preprocess
from energon_arrow.tokens.text_tokenizers import TokenizerSpec
from tests.tokens.test_tokenizers import build_hf_tokenizer, build_sentencepiece

pytestmark = pytest.mark.conformance

TEXTS = [
    "the quick brown fox",
    "",
    "Ünïcödé and emoji ✓ mixed with numbers 1234567890",
    "multi\nline\ntext with  double  spaces",
    "energon arrow " * 50,
]


@pytest.fixture(scope="module")
def megatron_indexed():
    from megatron.core.datasets import indexed_dataset
    from megatron.core.msc_utils import MultiStorageClientFeature

    MultiStorageClientFeature.disable()
    return indexed_dataset


@pytest.mark.parametrize("kind", ["hf", "sentencepiece", "byte"])
@pytest.mark.parametrize("append_eod", [False, True])
def test_documents_equal_tokenizer_output(tmp_path, megatron_indexed, kind, append_eod):
    if kind == "hf":
        from tokenizers import Tokenizer

        spec = build_hf_tokenizer(tmp_path)
        ref = Tokenizer.from_file(spec)
        encode, eod = (lambda t: ref.encode(t).ids), ref.token_to_id("<|endoftext|>")
    elif kind == "sentencepiece":
        import sentencepiece as spm

        spec = build_sentencepiece(tmp_path)
        ref = spm.SentencePieceProcessor(model_file=spec)
        encode, eod = ref.encode, ref.eos_id()
    else:
        spec, encode, eod = "byte", (lambda t: list(t.encode())), 256
    texts = TEXTS * 30
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    preprocess(
        [str(src)],
        str(tmp_path / "out"),
        PreprocessOptions(TokenizerSpec(spec), append_eod=append_eod, workers=2),
    )
    ds = megatron_indexed.IndexedDataset(str(tmp_path / "out_text_document"))
    assert ds.document_indices.size - 1 == len(texts)
    for d, text in enumerate(texts):
        want = encode(text)
        a, b = int(ds.document_indices[d]), int(ds.document_indices[d + 1])
        if not want:
            assert a == b  # empty document: a boundary without sequences, as Megatron's preprocess_data
            continue
        assert b == a + 1
        np.testing.assert_array_equal(ds[a], want + ([eod] if append_eod else []))
