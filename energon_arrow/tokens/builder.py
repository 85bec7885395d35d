"""`TokenWriter`: stream a Megatron-Core `.bin/.idx` pair, byte-identical to megatron-core's
IndexedDatasetBuilder for the same inputs, with bounded memory and vectorised bulk appends.

Token bytes stream straight to the output (.bin); the per-sequence index arrays go to spools that spill to a
temporary folder, so neither millions of documents nor a merge of thousands of parts need memory in
proportion to their documents. On `finalize` the .idx is written completely first, then the .bin is published,
then the .idx: an interrupted run never leaves a pair that looks complete. The checksum side file (`.crc`,
tokens/checksums.py) is computed as the bytes are written, written before anything is published and published
last; a stale one is removed before the new .bin appears.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from typing import Any

import numpy as np

from energon_arrow.adapters.publish import private_mkdtemp
from energon_arrow.tar.crc import ChunkCrcs, StreamCrc
from energon_arrow.tokens.checksums import CHUNK_BYTES, write_side_file
from energon_arrow.tokens.idx_format import IndexFormatError, dtype_code, pack_header, sequence_pointers
from energon_arrow.tokens.indexed import IndexedTokens, split_prefix
from energon_arrow.tokens.sink import Sink
from energon_arrow.tokens.spool import READ_CHUNK, ArraySpool

_LIST_FLUSH = 1 << 16  # per-call appends are buffered in Python lists this long before becoming arrays
COPY_BLOCK = 16 * 1024 * 1024


class TokenWriter:
    """Write the token dataset `{prefix}.bin` / `{prefix}.idx` (local path or URL, e.g. s3://bucket/dir/name).

    Megatron-compatible calls: `add_item(tokens, mode)`, `end_document()`, `add_document(tokens, lengths,
    modes)`, `add_index(prefix)`, `finalize()`. Bulk: `add_documents(tokens, sequence_lengths, ...)`.
    Use as a context manager: an exception discards everything written.
    """

    def __init__(
        self,
        prefix,
        dtype=np.int32,
        multimodal: bool = False,
        storage_options: Mapping[str, Any] | None = None,
        *,
        check_range: bool = True,
        spool_dir: str | None = None,
        spool_memory_bytes: int = 8 * 1024 * 1024,
    ):
        self.dtype = np.dtype(dtype)
        dtype_code(self.dtype)  # reject dtypes the format cannot hold before creating anything
        self.multimodal = bool(multimodal)
        self.check_range = check_range
        self.storage, stem = split_prefix(prefix, storage_options)
        self.bin_name, self.idx_name, self.crc_name = stem + ".bin", stem + ".idx", stem + ".crc"
        self._tmpdir = private_mkdtemp("ea-tokens-", spool_dir)
        mem = spool_memory_bytes
        self._lengths = ArraySpool(np.int32, f"{self._tmpdir}/lengths", mem)
        self._doc_ends = ArraySpool(np.int64, f"{self._tmpdir}/documents", mem)
        self._modes = ArraySpool(np.int8, f"{self._tmpdir}/modes", mem) if self.multimodal else None
        self._len_buf: list[int] = []
        self._mode_buf: list[int] = []
        self._end_buf: list[int] = []
        self._sequences = 0  # sequences added (buffered or spooled)
        self._doc_end = 0  # sequence count at the last document boundary
        self._documents = 0
        self._tokens = 0
        self._closed = False
        self._crcs = ChunkCrcs(ArraySpool(np.uint32, f"{self._tmpdir}/crcs", 1 << 20), CHUNK_BYTES)
        self._bin = Sink(self.storage, self.bin_name, self._crcs.update)

    # ---- context ------------------------------------------------------------------------------------------
    def __enter__(self) -> TokenWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()
        elif not self._closed:
            self.finalize()

    @property
    def bin_url(self) -> str:
        return self.storage.url_of(self.bin_name)

    @property
    def idx_url(self) -> str:
        return self.storage.url_of(self.idx_name)

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"{self.bin_url}: writer already finalized or aborted")

    # ---- token conversion ---------------------------------------------------------------------------------
    def _as_tokens(self, tokens) -> np.ndarray:
        src = np.asarray(tokens.numpy() if hasattr(tokens, "numpy") else tokens).reshape(-1)
        if src.dtype == self.dtype:
            return np.ascontiguousarray(src)
        if (
            self.check_range
            and src.size
            and src.dtype.kind in "iub"
            and self.dtype.kind in "iu"
            and not np.can_cast(src.dtype, self.dtype, "safe")
        ):
            info = np.iinfo(self.dtype)
            lo, hi = src.min(), src.max()
            if lo < info.min or hi > info.max:
                raise ValueError(
                    f"{self.bin_url}: token values [{lo}, {hi}] do not fit {self.dtype} "
                    f"(range [{info.min}, {info.max}]); choose a wider dtype"
                )
        return src.astype(self.dtype)

    def _write_tokens(self, arr: np.ndarray) -> None:
        if arr.size:
            self._bin.write(arr.data)
        self._tokens += arr.size

    # ---- Megatron-compatible appends ----------------------------------------------------------------------
    def add_item(self, tokens, mode: int = 0) -> None:
        """Append one sequence to the current document (close it with `end_document`)."""
        self._check_open()
        arr = self._as_tokens(tokens)
        self._write_tokens(arr)
        self._len_buf.append(arr.size)
        if self.multimodal:
            self._mode_buf.append(int(mode))
        self._sequences += 1
        if len(self._len_buf) >= _LIST_FLUSH:
            self._flush_lists()

    def end_document(self) -> None:
        """Close the current document (an empty one when no item was added since the last boundary)."""
        self._check_open()
        self._end_buf.append(self._sequences)
        self._doc_end = self._sequences
        self._documents += 1
        if len(self._end_buf) >= _LIST_FLUSH:
            self._flush_lists()

    def add_document(self, tokens, lengths=None, modes=None) -> None:
        """Append one document: `tokens` holds its sequences back to back, `lengths` their sizes (default:
        one sequence), `modes` their modes (multimodal only; default 0)."""
        if self._closed:
            self._check_open()
        if type(tokens) is np.ndarray and tokens.dtype == self.dtype and tokens.flags.c_contiguous:
            arr = tokens  # the common case, kept cheap: this runs once per document
        else:
            arr = self._as_tokens(tokens)
        n = arr.size
        if self._sequences != self._doc_end:
            self._check_no_open_items("add_document")
        if lengths is None and not self.multimodal:
            self._len_buf.append(n)
            count = 1
        else:
            lengths = [n] if lengths is None else [int(x) for x in lengths]
            if sum(lengths) != n or any(x < 0 for x in lengths):
                raise ValueError(
                    f"{self.bin_url}: document lengths {lengths} do not partition its {n} tokens"
                )
            if self.multimodal:
                modes = [0] * len(lengths) if modes is None else [int(m) for m in modes]
                if len(modes) != len(lengths):
                    raise ValueError(f"{self.bin_url}: {len(modes)} modes for {len(lengths)} sequences")
                self._mode_buf.extend(modes)
            self._len_buf.extend(lengths)
            count = len(lengths)
        self._write_tokens(arr)
        self._sequences += count
        self._doc_end = self._sequences
        self._end_buf.append(self._sequences)
        self._documents += 1
        if len(self._end_buf) >= _LIST_FLUSH:
            self._flush_lists()

    def _check_no_open_items(self, what: str) -> None:
        if self._sequences != self._doc_end:
            raise ValueError(
                f"{self.bin_url}: {self._sequences - self._doc_end} sequence(s) added with add_item are not "
                f"closed by end_document() before {what}"
            )

    def _flush_lists(self) -> None:
        if self._len_buf:
            self._lengths.append(np.array(self._len_buf, np.int32))
            self._len_buf = []
        if self._mode_buf:
            self._modes.append(np.array(self._mode_buf, np.int8))
            self._mode_buf = []
        if self._end_buf:
            self._doc_ends.append(np.array(self._end_buf, np.int64))
            self._end_buf = []

    # ---- bulk appends -------------------------------------------------------------------------------------
    def add_documents(self, tokens, sequence_lengths, sequences_per_document=None, modes=None) -> None:
        """Append many documents in one vectorised call. `tokens`: all sequences back to back;
        `sequence_lengths`: tokens per sequence; `sequences_per_document`: sequences per document (default 1
        each; 0 makes an empty document); `modes`: per sequence (multimodal only; default 0)."""
        self._check_open()
        self._check_no_open_items("add_documents")
        arr = self._as_tokens(tokens)
        lengths = np.asarray(sequence_lengths, np.int64).reshape(-1)
        if (lengths < 0).any() or int(lengths.sum()) != arr.size:
            raise ValueError(
                f"{self.bin_url}: sequence lengths sum to {int(lengths.sum())}, not {arr.size} tokens"
            )
        if sequences_per_document is None:
            per_doc = np.ones(lengths.size, np.int64)
        else:
            per_doc = np.asarray(sequences_per_document, np.int64).reshape(-1)
            if (per_doc < 0).any() or int(per_doc.sum()) != lengths.size:
                raise ValueError(
                    f"{self.bin_url}: sequences_per_document sums to {int(per_doc.sum())}, "
                    f"not {lengths.size} sequences"
                )
        if self.multimodal:
            m = np.zeros(lengths.size, np.int8) if modes is None else np.asarray(modes).reshape(-1)
            if m.size != lengths.size:
                raise ValueError(f"{self.bin_url}: {m.size} modes for {lengths.size} sequences")
        self._flush_lists()
        self._write_tokens(arr)
        self._lengths.append(lengths)
        if self.multimodal:
            self._modes.append(m)
        self._doc_ends.append(self._sequences + np.cumsum(per_doc))
        self._sequences += lengths.size
        self._doc_end = self._sequences
        self._documents += per_doc.size

    def add_index(
        self, prefix, storage_options: Mapping[str, Any] | None = None, max_documents: int | None = None
    ) -> None:
        """Append an existing dataset (a prefix, or one already open), or only its first `max_documents`
        documents: its index arrays are streamed in chunks and its .bin copied."""
        self._check_open()
        self._check_no_open_items("add_index")
        if isinstance(prefix, IndexedTokens):
            part = prefix
        else:
            part = IndexedTokens(prefix, storage_options, multimodal=True if self.multimodal else None)
        if part.dtype != self.dtype:
            raise ValueError(f"{part.idx_url}: dtype {part.dtype} differs from the output's {self.dtype}")
        itemsize = self.dtype.itemsize
        ndocs = (
            part.num_documents if max_documents is None else max(0, min(part.num_documents, max_documents))
        )
        n = int(part.document_indices[ndocs])
        nbytes = int(part.sequence_lengths[:n].sum(dtype=np.int64)) * itemsize
        if max_documents is None and part.bin_size != nbytes:
            raise ValueError(
                f"{part.bin_url}: {part.bin_size} bytes but its sequences hold {nbytes}; cannot append it"
            )
        self._flush_lists()
        start = 0
        for a in range(0, n, READ_CHUNK):
            b = min(n, a + READ_CHUNK)
            lens = np.asarray(part.sequence_lengths[a:b])
            ptrs = np.asarray(part.sequence_pointers[a:b])
            expect = sequence_pointers(lens, itemsize, start)
            if not np.array_equal(ptrs, expect):
                k = a + int(np.argmax(ptrs != expect))
                raise IndexFormatError(
                    part.idx_url,
                    part.header.pointers_offset + 8 * k,
                    f"sequence {k} is not stored contiguously; cannot append it",
                )
            start = int(expect[-1]) + int(lens[-1]) * itemsize
            self._lengths.append(np.array(lens))
            if self.multimodal:
                self._modes.append(np.array(part.sequence_modes[a:b]))
        docs = part.document_indices
        for a in range(1, ndocs + 1, READ_CHUNK):
            self._doc_ends.append(docs[a : min(ndocs + 1, a + READ_CHUNK)] + self._sequences)
        self._copy_bin(part, nbytes)
        self._sequences += n
        self._doc_end = self._sequences
        self._documents += ndocs

    def _copy_bin(self, part: IndexedTokens, nbytes: int) -> None:
        left = nbytes
        if left == 0:
            return
        for chunk in part.storage.iter_chunks(part.bin_name, COPY_BLOCK):
            piece = chunk if len(chunk) <= left else memoryview(chunk)[:left]
            self._bin.write(piece)
            left -= len(piece)
            if left == 0:
                break
        if left:
            raise ValueError(f"{part.bin_url}: ended {left} bytes early while copying")
        self._tokens += nbytes // self.dtype.itemsize

    # ---- finishing ----------------------------------------------------------------------------------------
    def finalize(self, idx_path=None) -> dict[str, Any]:
        """Write the .idx, then publish .bin and .idx (in that order). Returns a summary. `idx_path` is
        accepted for Megatron compatibility and must name this writer's own .idx when given."""
        self._check_open()
        if idx_path is not None and str(idx_path) not in (self.idx_url, self.idx_name):
            raise ValueError(f"finalize: {idx_path} is not this writer's index {self.idx_url}")
        self._check_no_open_items("finalize")
        self._flush_lists()
        idx_crc = StreamCrc()
        idx = Sink(self.storage, self.idx_name, idx_crc.update)
        side = None
        try:
            self._write_index(idx)
            side = Sink(self.storage, self.crc_name)
            write_side_file(side, self._crcs, idx_crc)
            for stale in (self.idx_name, self.crc_name):  # never pair the new .bin with a stale .idx or .crc
                if self.storage.exists(stale):
                    self.storage.remove(stale)
            self._bin.publish()
            idx.publish()
            side.publish()
        except BaseException:
            idx.discard()
            if side is not None:
                side.discard()
            self.abort()
            raise
        self._closed = True
        self._cleanup()
        return {
            "prefix": self.storage.url_of(self.bin_name[:-4]),
            "sequences": self._sequences,
            "documents": self._documents,
            "tokens": self._tokens,
            "bin_bytes": self._bin.bytes_written,
            "idx_bytes": idx.bytes_written,
            "dtype": str(self.dtype),
        }

    def _write_index(self, idx: Sink) -> None:
        idx.write(pack_header(self.dtype, self._sequences, self._documents + 1))
        for chunk in self._lengths.chunks():
            idx.write(chunk.data)
        start = 0
        itemsize = self.dtype.itemsize
        for chunk in self._lengths.chunks():
            ptr = sequence_pointers(chunk, itemsize, start)
            start = int(ptr[-1]) + int(chunk[-1]) * itemsize
            idx.write(ptr.data)
        idx.write(np.zeros(1, np.int64).data)
        for chunk in self._doc_ends.chunks():
            idx.write(np.ascontiguousarray(chunk).data)
        if self._modes is not None:
            for chunk in self._modes.chunks():
                idx.write(np.ascontiguousarray(chunk).data)

    def abort(self) -> None:
        """Discard everything written; nothing appears under the output names."""
        if self._closed:
            return
        self._closed = True
        self._bin.discard()
        self._cleanup()

    def _cleanup(self) -> None:
        for spool in (self._lengths, self._doc_ends, self._modes, self._crcs.spool):
            if spool is not None:
                spool.close()
        shutil.rmtree(self._tmpdir, ignore_errors=True)


def merge_datasets(
    parts,
    output_prefix,
    storage_options: Mapping[str, Any] | None = None,
    *,
    spool_dir: str | None = None,
    spool_memory_bytes: int = 8 * 1024 * 1024,
) -> dict[str, Any]:
    """Concatenate token datasets (prefixes, in order) into `output_prefix`; dtype and modes must agree.
    Memory stays bounded however many parts and documents there are."""
    parts = list(parts)
    if not parts:
        raise ValueError("merge needs at least one input dataset")
    first = IndexedTokens(parts[0], storage_options)
    with TokenWriter(
        output_prefix,
        first.dtype,
        first.multimodal,
        storage_options,
        spool_dir=spool_dir,
        spool_memory_bytes=spool_memory_bytes,
    ) as w:
        for p in [first, *parts[1:]]:
            w.add_index(p, storage_options)
        return w.finalize()
