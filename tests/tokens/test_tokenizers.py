"""Tokenizer specs: byte, a tiny locally trained HF tokenizer.json and SentencePiece model (nothing downloaded)."""

from __future__ import annotations

import numpy as np
import pytest

from energon_arrow.tokens.text_tokenizers import (
    ByteTokenizer,
    TokenizerError,
    TokenizerSpec,
    load_tokenizer,
)

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "Ünïcödé text, with punctuation! and numbers 12345",
    "energon arrow writes megatron token files",
    "a b c d e f g h i j k l m n o p q r s t u v w x y z",
] * 20


def build_hf_tokenizer(path) -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(CORPUS, trainer)
    out = str(path / "tokenizer.json")
    tok.save(out)
    return out


def build_sentencepiece(path) -> str:
    import sentencepiece as spm

    prefix = str(path / "tiny")
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS),
        model_prefix=prefix,
        vocab_size=80,
        model_type="bpe",
        hard_vocab_limit=False,
        minloglevel=2,
    )
    return prefix + ".model"


@pytest.fixture(scope="session")
def hf_tokenizer_json(tmp_path_factory):
    return build_hf_tokenizer(tmp_path_factory.mktemp("hf"))


@pytest.fixture(scope="session")
def sp_model(tmp_path_factory):
    return build_sentencepiece(tmp_path_factory.mktemp("sp"))


def split(flat, lengths):
    return [x.tolist() for x in np.split(flat, np.cumsum(lengths)[:-1])] if len(lengths) else []


def test_byte_tokenizer():
    tok = load_tokenizer("byte")
    assert isinstance(tok, ByteTokenizer) and tok.eod == 256 and tok.vocab_size == 257
    flat, lengths = tok.encode_batch(["ab", "", "é"])
    assert split(flat, lengths) == [[97, 98], [], [0xC3, 0xA9]]
    with pytest.raises(TokenizerError, match="fixed"):
        load_tokenizer(TokenizerSpec("byte", eod_token="x"))


def test_hf_tokenizer_equals_library(hf_tokenizer_json):
    from tokenizers import Tokenizer

    ref = Tokenizer.from_file(hf_tokenizer_json)
    for spec in (hf_tokenizer_json, f"hf:{hf_tokenizer_json}"):
        tok = load_tokenizer(spec)
        assert tok.eod == ref.token_to_id("<|endoftext|>")
        texts = CORPUS[:4] + ["", "unseen wörds ✓"]
        flat, lengths = tok.encode_batch(texts)
        assert split(flat, lengths) == [ref.encode(t).ids for t in texts]
    with pytest.raises(TokenizerError, match="'<nope>' is not in the vocabulary"):
        load_tokenizer(TokenizerSpec(hf_tokenizer_json, eod_token="<nope>"))


def test_sentencepiece_equals_library(sp_model):
    import sentencepiece as spm

    ref = spm.SentencePieceProcessor(model_file=sp_model)
    tok = load_tokenizer(sp_model)
    assert tok.eod == ref.eos_id()
    texts = CORPUS[:4] + ["", "zzz qqq"]
    flat, lengths = tok.encode_batch(texts)
    assert split(flat, lengths) == [ref.encode(t) for t in texts]
    bos = load_tokenizer(TokenizerSpec(f"sentencepiece:{sp_model}", add_special_tokens=True))
    flat, lengths = bos.encode_batch(["abc"])
    assert flat.tolist() == ref.encode("abc", add_bos=True)


def test_bad_specs(tmp_path):
    with pytest.raises(TokenizerError, match="unknown tokenizer 'gpt2'"):
        load_tokenizer("gpt2")
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(TokenizerError, match="broken.json: cannot load a Hugging Face tokenizer"):
        load_tokenizer(str(tmp_path / "broken.json"))
    with pytest.raises(TokenizerError, match="cannot load a SentencePiece model"):
        load_tokenizer(str(tmp_path / "missing.model"))
