"""Text tokenizers for `preprocess`: a Hugging Face tokenizer.json, a SentencePiece .model, or built-in bytes.

All load from local files only (nothing is downloaded). `encode_batch(texts)` returns the token ids of all
texts back to back plus each text's token count, so callers never hold per-document Python lists.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass

import numpy as np

EOD_CANDIDATES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|eot_id|>", "[SEP]")
_MISSING_EXTRA = "needs the {pkg!r} package: pip install 'energon-arrow[tokenizers]'"


class TokenizerError(ValueError):
    """A tokenizer spec that cannot be loaded or used as asked."""


@dataclass(frozen=True)
class TokenizerSpec:
    """What workers need to load the same tokenizer: the spec string and options (picklable)."""

    spec: str
    eod_token: str | None = None
    add_special_tokens: bool | None = None  # None: the tokenizer's default (HF: its post-processor; SP: none)


class ByteTokenizer:
    """UTF-8 bytes as token ids 0-255; end of document is 256 (vocabulary of 257)."""

    name = "byte"
    vocab_size = 257
    eod = 256

    def encode_batch(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        encoded = [t.encode("utf-8", "surrogatepass") for t in texts]
        lengths = np.fromiter((len(b) for b in encoded), np.int64, len(encoded))
        return np.frombuffer(b"".join(encoded), np.uint8), lengths


class HFTokenizer:
    """A Hugging Face `tokenizers` tokenizer.json, batch-encoded in Rust."""

    def __init__(self, path: str, eod_token: str | None, add_special_tokens: bool | None):
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise TokenizerError(
                f"{path}: a tokenizer.json " + _MISSING_EXTRA.format(pkg="tokenizers")
            ) from None
        if os.path.isdir(path):
            path = os.path.join(path, "tokenizer.json")
        try:
            self._tok = Tokenizer.from_file(path)
        except Exception as exc:
            raise TokenizerError(f"{path}: cannot load a Hugging Face tokenizer: {exc}") from None
        self.name = f"hf:{path}"
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        self.add_special_tokens = True if add_special_tokens is None else add_special_tokens
        self.eod = _find_eod(path, eod_token, self._tok.token_to_id)
        self._encode = getattr(self._tok, "encode_batch_fast", self._tok.encode_batch)

    def encode_batch(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        encs = self._encode(texts, add_special_tokens=self.add_special_tokens)
        ids = [e.ids for e in encs]
        return _flatten(ids)


class SentencePieceTokenizer:
    """A SentencePiece `.model`."""

    def __init__(self, path: str, eod_token: str | None, add_special_tokens: bool | None):
        try:
            import sentencepiece
        except ImportError:
            raise TokenizerError(f"{path}: a .model " + _MISSING_EXTRA.format(pkg="sentencepiece")) from None
        try:
            self._sp = sentencepiece.SentencePieceProcessor(model_file=path)
        except Exception as exc:
            raise TokenizerError(f"{path}: cannot load a SentencePiece model: {exc}") from None
        self.name = f"sentencepiece:{path}"
        self.vocab_size = self._sp.get_piece_size()
        self.add_bos = bool(add_special_tokens)  # "special tokens" for SentencePiece: a leading BOS
        if eod_token is None:
            self.eod = self._sp.eos_id() if self._sp.eos_id() >= 0 else None
        else:
            self.eod = _find_eod(path, eod_token, lambda t: _sp_id(self._sp, t))

    def encode_batch(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        return _flatten(self._sp.encode(texts, out_type=int, add_bos=self.add_bos))


def _sp_id(sp, token: str) -> int | None:
    i = sp.piece_to_id(token)
    return None if i == sp.unk_id() and token != sp.id_to_piece(sp.unk_id()) else i


def _find_eod(path: str, eod_token: str | None, lookup) -> int | None:
    if eod_token is not None:
        eod = lookup(eod_token)
        if eod is None:
            raise TokenizerError(f"{path}: end-of-document token {eod_token!r} is not in the vocabulary")
        return eod
    for cand in EOD_CANDIDATES:
        eod = lookup(cand)
        if eod is not None:
            return eod
    return None


def _flatten(ids: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.fromiter((len(x) for x in ids), np.int64, len(ids))
    total = int(lengths.sum())
    flat = np.fromiter(itertools.chain.from_iterable(ids), np.int64, total)
    return flat, lengths


def load_tokenizer(spec: TokenizerSpec | str):
    """`byte`, `hf:PATH` / a tokenizer.json path (or a folder holding one), `sentencepiece:PATH` / a .model."""
    if isinstance(spec, str):
        spec = TokenizerSpec(spec)
    text = spec.spec
    kind, _, rest = text.partition(":")
    if text in ("byte", "bytes"):
        if spec.eod_token is not None:
            raise TokenizerError("the byte tokenizer's end-of-document id is fixed (256); drop --eod-token")
        if spec.add_special_tokens:
            raise TokenizerError("the byte tokenizer has no special tokens to add")
        return ByteTokenizer()
    if kind in ("hf", "huggingface") and rest:
        return HFTokenizer(rest, spec.eod_token, spec.add_special_tokens)
    if kind in ("sentencepiece", "spm") and rest:
        return SentencePieceTokenizer(rest, spec.eod_token, spec.add_special_tokens)
    if text.endswith(".model"):
        return SentencePieceTokenizer(text, spec.eod_token, spec.add_special_tokens)
    if text.endswith(".json") or os.path.isfile(os.path.join(text, "tokenizer.json")):
        return HFTokenizer(text, spec.eod_token, spec.add_special_tokens)
    raise TokenizerError(
        f"unknown tokenizer {text!r}: use 'byte', a tokenizer.json path (or hf:PATH), "
        "or a SentencePiece .model path (or sentencepiece:PATH)"
    )
