"""`IndexedTokens`: read a Megatron `.bin/.idx` token dataset from a local or remote (s3://) prefix.

Local files are memory-mapped (zero-copy numpy views). Remote prefixes download the .idx once (optionally into
a local disk cache keyed by the object's identity) and read only the needed byte ranges of the .bin through a
bounded cache (see tokens.remote). Everything is validated at open time.

`verify="crc"` (tokens/checksums.py; docs/tokens.md, "Checksums"): with the side file `PREFIX.crc` the .idx is
checked when it is read; remote .bin bytes are checked chunk by chunk as they are fetched (read again on a
mismatch); local ones the first time a read (`get`, `get_many`, `[]`) touches their chunk.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from energon_arrow.adapters import Storage, open_storage
from energon_arrow.adapters.errors import classify
from energon_arrow.tokens.checksums import (
    LocalChunks,
    check_idx,
    idx_matches,
    no_side_file,
    read_idx,
    read_side_file,
    resolve_verify,
)
from energon_arrow.tokens.idx_format import (
    HEADER_SIZE,
    IdxHeader,
    IndexFormatError,
    check_arrays,
    detect_multimodal,
    parse_header,
)
from energon_arrow.tokens.remote import RangeCache

DEFAULT_CACHE_BYTES = 64 * 1024 * 1024
_TAKE_CHUNK = 1 << 22  # tokens gathered per fancy-indexing step (bounds the index array's memory)
_SLICE_MIN_AVG = 4096  # mean piece length (tokens) from which per-piece slice copies beat vectorised gathers
_ROW = 64  # pieces of at least this many tokens are gathered as strided rows of this width


def wrap_indices(ks: np.ndarray, n: int, describe) -> np.ndarray:
    """Indices `ks` (int64) into `n` items with negative ones counted from the end; IndexError with
    `describe(bad_index)` for any outside [-n, n)."""
    outside = (ks < -n) | (ks >= n)
    if outside.any():
        raise IndexError(describe(int(ks[outside][0])))
    return np.where(ks < 0, ks + n, ks)


def prefix_of(text: str) -> str:
    """The dataset prefix named by `text`: `PREFIX`, `PREFIX.idx` or `PREFIX.bin`."""
    return text[: -len(".idx")] if text.endswith((".idx", ".bin")) else text


def split_prefix(prefix, storage_options: Mapping[str, Any] | None = None) -> tuple[Storage, str]:
    """(storage of the folder, file name stem) for a dataset prefix such as `s3://b/dir/name` or `/x/name`."""
    if isinstance(prefix, Storage):
        raise TypeError("pass a prefix URL or path, not a Storage")
    text = os.fspath(prefix)
    if "://" in text and not text.startswith("file://"):
        head, _, stem = text.rstrip("/").rpartition("/")
        if "://" not in head:  # s3://name: no bucket folder
            raise ValueError(f"{text}: a remote token dataset prefix needs a bucket, e.g. s3://bucket/name")
    else:
        head, stem = os.path.split(os.path.abspath(text.removeprefix("file://")))
    if not stem:
        raise ValueError(f"{text}: the prefix names a folder; expected a path prefix such as dir/name")
    return open_storage(head, storage_options), stem


class IndexedTokens:
    """A Megatron-Core token dataset (sequences grouped into documents), opened from `prefix` (no suffix).

    `multimodal=None` detects sequence modes from the .idx size; True/False insists. Remote reads use a cache
    of `cache_bytes` and extend each miss to `readahead_bytes`; `idx_cache_dir` keeps downloaded .idx files.
    `verify`: "crc" or "none" (default: the storage option `verify` / ENERGON_ARROW_VERIFY, else "crc" for
    remote datasets with a checksum side file, "none" for local ones; see the module docstring).
    """

    def __init__(
        self,
        prefix,
        storage_options: Mapping[str, Any] | None = None,
        *,
        multimodal: bool | None = None,
        validate: bool = True,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        readahead_bytes: int = 0,
        idx_cache_dir: str | os.PathLike | None = None,
        verify: str | None = None,
    ):
        self.path_prefix = os.fspath(prefix)
        self._options = dict(storage_options or {})
        self._settings = (multimodal, cache_bytes, readahead_bytes, idx_cache_dir, verify)
        self._open(validate)

    # ---- opening ------------------------------------------------------------------------------------------
    def _open(self, validate: bool) -> None:
        multimodal, cache_bytes, readahead_bytes, idx_cache_dir, verify = self._settings
        storage, stem = split_prefix(self.path_prefix, self._options)
        self.storage = storage
        self.idx_name, self.bin_name = stem + ".idx", stem + ".bin"
        self.idx_url, self.bin_url = storage.url_of(self.idx_name), storage.url_of(self.bin_name)
        self.bin_size = bin_size = storage.stat(self.bin_name).size
        side = None  # the checksum side file, when verifying
        verifying, explicit = resolve_verify(storage, verify, not storage.is_local)
        if verifying:
            side = read_side_file(storage, stem + ".crc")
            if side is None:
                from_env = storage.io_settings.verify_from == "environment" and verify is None
                no_side_file(storage.url_of(stem + ".crc"), storage.url_of(stem), explicit, from_env)
        self.checksums = side
        raw = self._load_idx(idx_cache_dir, side)
        header = parse_header(bytes(raw[:HEADER_SIZE]), self.idx_url)
        self.header: IdxHeader = header
        self.multimodal = detect_multimodal(header, raw.size, multimodal, self.idx_url)
        s = header.sequence_count
        self.dtype = header.dtype
        self.sequence_lengths = raw[header.lengths_offset : header.pointers_offset].view(np.int32)
        self.sequence_pointers = raw[header.pointers_offset : header.documents_offset].view(np.int64)
        self.document_indices = raw[header.documents_offset : header.modes_offset].view(np.int64)
        self.sequence_modes = (
            raw[header.modes_offset : header.modes_offset + s].view(np.int8) if self.multimodal else None
        )
        if validate:
            self._validate(raw, header)
        if storage.is_local:
            # a plain ndarray view of the read-only map (it keeps the map alive): slicing an np.memmap
            # subclass runs Python per slice (__array_finalize__), a plain view does not
            self._tokens = np.asarray(
                storage.mmap(self.bin_name, self.dtype, 0, bin_size // self.dtype.itemsize)
            )
            self._remote = None
            self._local_check = (
                None if side is None else LocalChunks(side, self._tokens.view(np.uint8), self.bin_url)
            )
        else:
            self._tokens = self._local_check = None
            self._remote = RangeCache(storage, self.bin_name, bin_size, cache_bytes, readahead_bytes, side)

    def _validate(self, raw: np.ndarray, header: IdxHeader) -> None:
        """Check the .idx arrays window by window: local files are read with pread into two small reused
        buffers (no page of the map is touched, so a multi-GB index costs neither RSS nor page faults here);
        remote ones are already in memory."""
        if not self.storage.is_local:

            def read(offset, dtype, first, count):
                return raw[offset + first * dtype.itemsize : offset + (first + count) * dtype.itemsize].view(
                    dtype
                )

            check_arrays(header, read, self.bin_size, self.idx_url, self.bin_url)
            return
        # one buffer per stored array: a window stays valid until the next window of the same array
        buffers: dict[int, np.ndarray] = {}
        try:
            fd = os.open(self.storage.local_path(self.idx_name), os.O_RDONLY)
        except OSError as exc:
            raise classify(exc, self.idx_url) from None

        def read(offset, dtype, first, count):
            nbytes = count * dtype.itemsize
            buf = buffers.get(offset)
            if buf is None or buf.size < nbytes:
                buf = buffers[offset] = np.empty(nbytes, np.uint8)
            at = offset + first * dtype.itemsize
            got = os.preadv(fd, [memoryview(buf)[:nbytes]], at)
            if got != nbytes:  # the file shrank since it was opened
                raise IndexFormatError(
                    self.idx_url, at + got, f"truncated .idx: {nbytes - got} bytes missing"
                )
            return buf[:nbytes].view(dtype)

        try:
            check_arrays(header, read, self.bin_size, self.idx_url, self.bin_url)
        finally:
            os.close(fd)

    def _load_idx(self, idx_cache_dir, side) -> np.ndarray:
        """The .idx bytes, checked against the side file `side` when given (a local cached copy that does not
        match is downloaded again: only checked bytes are cached)."""
        storage = self.storage
        if storage.is_local:
            raw = np.asarray(storage.mmap(self.idx_name, np.uint8))
            if side is not None:
                check_idx(side, raw, self.bin_size, self.idx_url)
            return raw
        if idx_cache_dir is None:
            return np.frombuffer(read_idx(storage, self.idx_name, side, self.bin_size), np.uint8)
        info = storage.stat(self.idx_name)
        key = hashlib.sha256(f"{self.idx_url}\n{info.identity}".encode()).hexdigest()[:24]
        cache, name = open_storage(os.fspath(idx_cache_dir)), f"{key}-{self.idx_name}"
        if cache.exists(name):
            raw = np.asarray(cache.mmap(name))
            if side is None or idx_matches(side, raw):
                return raw
        cache.write_atomic(name, read_idx(storage, self.idx_name, side, self.bin_size))
        return np.asarray(cache.mmap(name))

    def __getstate__(self):
        return {"path_prefix": self.path_prefix, "options": self._options, "settings": self._settings}

    def __setstate__(self, state):
        self.path_prefix = state["path_prefix"]
        self._options = state["options"]
        self._settings = state["settings"]
        self._open(validate=False)

    def __repr__(self):
        return (
            f"IndexedTokens({self.path_prefix!r}, sequences={len(self)}, documents={self.num_documents}, "
            f"dtype={self.dtype}{', multimodal' if self.multimodal else ''})"
        )

    @staticmethod
    def exists(prefix, storage_options: Mapping[str, Any] | None = None) -> bool:
        storage, stem = split_prefix(prefix, storage_options)
        return storage.exists(stem + ".idx") and storage.exists(stem + ".bin")

    # ---- shape --------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self.header.sequence_count

    @property
    def num_documents(self) -> int:
        return self.document_indices.size - 1

    @property
    def num_tokens(self) -> int:
        return int(self.sequence_lengths.sum(dtype=np.int64))

    @property
    def is_local(self) -> bool:
        return self._remote is None

    def io_stats(self) -> dict[str, int]:
        """Remote read counters (bytes_fetched, requests, cache_hits, cached_bytes); zeros when local."""
        if self._remote is None:
            return {"bytes_fetched": 0, "requests": 0, "cache_hits": 0, "cached_bytes": 0}
        return self._remote.stats()

    # ---- reads --------------------------------------------------------------------------------------------
    def _seq_index(self, idx) -> int:
        n = len(self)
        i = int(idx)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"sequence index {idx} out of range for {n} sequences in {self.idx_url}")
        return i

    def __getitem__(self, idx):
        """Sequence `idx` (array; `(array, mode)` for multimodal datasets), or a list for a step-1 slice."""
        if isinstance(idx, slice):
            start, stop, step = idx.indices(len(self))
            if step != 1:
                raise ValueError("slices of a token dataset must be contiguous (step 1)")
            ids = np.arange(start, max(start, stop), dtype=np.int64)
            lengths = self.sequence_lengths[ids].astype(np.int64)
            flat = self.get_many(ids, None, lengths)
            parts = np.split(flat, np.cumsum(lengths)[:-1]) if ids.size else []
            return (parts, self.sequence_modes[ids]) if self.multimodal else parts
        if isinstance(idx, (int, np.integer)):
            return self.get(idx)
        raise TypeError(f"token dataset index must be an int or a slice, not {type(idx).__name__}")

    def get(self, idx, offset: int = 0, length: int | None = None):
        """`length` tokens of sequence `idx` from token `offset` (to its end when None); zero-copy locally."""
        i = self._seq_index(idx)
        seq_len = int(self.sequence_lengths[i])
        if length is None:
            length = seq_len - offset
        if offset < 0 or length < 0 or offset + length > seq_len:
            raise IndexError(
                f"piece [{offset}, {offset + length}) outside sequence {i} of length {seq_len} in {self.idx_url}"
            )
        if self._tokens is not None:
            start = int(self.sequence_pointers[i]) // self.dtype.itemsize + offset
            if self._local_check is not None:
                at = np.array([start * self.dtype.itemsize])
                self._local_check.check(at, at + length * self.dtype.itemsize)
            out = self._tokens[start : start + length]
        else:
            out = self.get_many(np.array([i]), np.array([offset]), np.array([length]))
        return (out, self.sequence_modes[i]) if self.multimodal else out

    @property
    def local_tokens(self) -> np.ndarray | None:
        """The whole .bin as a read-only memory-mapped array of `dtype` (local datasets; None for remote ones).
        Reads through it are not checked against the side file, whatever `verify` says."""
        return self._tokens

    def get_many(self, seq_ids, offsets=None, lengths=None, out: np.ndarray | None = None) -> np.ndarray:
        """Gather many pieces in one call: piece k is tokens [offsets[k], offsets[k]+lengths[k]) of sequence
        seq_ids[k] (offsets default 0, lengths default to the sequence end). Returns the pieces concatenated
        in order as one 1-D array of `dtype`, written into `out` (at least sum(lengths) long) when given."""
        ids = np.asarray(seq_ids, dtype=np.int64).reshape(-1)
        n = len(self)
        ids = wrap_indices(
            ids, n, lambda bad: f"sequence index {bad} out of range for {n} sequences in {self.idx_url}"
        )
        seq_len = self.sequence_lengths[ids].astype(np.int64)
        offs = np.zeros(ids.size, np.int64) if offsets is None else _broadcast(offsets, ids.size, "offsets")
        lens = seq_len - offs if lengths is None else _broadcast(lengths, ids.size, "lengths")
        bad = (offs < 0) | (lens < 0) | (offs + lens > seq_len)
        if bad.any():
            k = int(np.argmax(bad))
            raise IndexError(
                f"piece {k}: tokens [{offs[k]}, {offs[k] + lens[k]}) outside sequence {ids[k]} "
                f"of length {seq_len[k]} in {self.idx_url}"
            )
        total = int(lens.sum())
        if out is None:
            out = np.empty(total, self.dtype)
        else:
            if out.dtype != self.dtype or out.ndim != 1 or out.size < total or not out.flags.c_contiguous:
                raise ValueError(
                    f"out must be a contiguous 1-D {self.dtype} array of at least {total} tokens, "
                    f"got {out.dtype} shape {out.shape}"
                )
            out = out[:total]
        if total == 0:
            return out
        starts = self.sequence_pointers[ids] // self.dtype.itemsize + offs
        dest = np.zeros(ids.size, np.int64)
        np.cumsum(lens[:-1], out=dest[1:])
        if self._tokens is not None:
            if self._local_check is not None:
                size = self.dtype.itemsize
                self._local_check.check(starts * size, (starts + lens) * size)
            _gather_local(self._tokens, starts, lens, dest, out)
        else:
            size = self.dtype.itemsize
            self._remote.read_into(starts * size, lens * size, out.view(np.uint8), dest * size)
        return out

    def document_sequences(self, doc) -> tuple[int, int]:
        """The [first, last) sequence ids of document `doc`."""
        d = int(doc)
        if not 0 <= d < self.num_documents:
            raise IndexError(
                f"document {doc} out of range for {self.num_documents} documents in {self.idx_url}"
            )
        return int(self.document_indices[d]), int(self.document_indices[d + 1])

    def document_lengths(self) -> np.ndarray:
        """Tokens per document (int64)."""
        csum = np.zeros(len(self) + 1, np.int64)
        np.cumsum(self.sequence_lengths, out=csum[1:])
        return csum[self.document_indices[1:]] - csum[self.document_indices[:-1]]


def _broadcast(values, n: int, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.int64).reshape(-1)
    if arr.size == 1 and n != 1:
        return np.full(n, arr[0], np.int64)
    if arr.size != n:
        raise ValueError(f"{name} has {arr.size} entries for {n} pieces")
    return arr


def _gather_local(tokens: np.ndarray, starts, lens, dest, out) -> None:
    """Copy token pieces out of a memory-mapped array: slice copies when pieces are long on average, else
    vectorised gathers over groups of pieces of at most ~_TAKE_CHUNK tokens (bounds the index arrays)."""
    n = starts.size
    if out.size >= _SLICE_MIN_AVG * n:
        for s, ln, d in zip(starts.tolist(), lens.tolist(), dest.tolist()):
            out[d : d + ln] = tokens[s : s + ln]
        return
    cuts = np.searchsorted(dest, np.arange(0, out.size, _TAKE_CHUNK)).tolist() + [n]
    for a, b in zip(cuts[:-1], cuts[1:]):
        if a < b:
            _gather_group(tokens, starts[a:b], lens[a:b], dest[a:b], out)


def _gather_group(tokens: np.ndarray, starts, lens, dest, out) -> None:
    """Pieces of at least _ROW tokens move as _ROW-token rows of overlapping strided views (each piece's last row
    ends at the piece's end, so rows overlap only inside a piece and write equal values); shorter pieces move
    token by token. Indices are checked in range before: np.take's "wrap" then equals "raise", only faster."""
    long = lens >= _ROW
    if long.any():
        ls, ll, ld = starts[long], lens[long], dest[long]
        rows = -(-ll // _ROW)
        first = np.zeros(rows.size, np.int64)
        np.cumsum(rows[:-1], out=first[1:])
        owner = np.repeat(np.arange(rows.size), rows)
        at = np.minimum((np.arange(owner.size) - first[owner]) * _ROW, ll[owner] - _ROW)
        step = tokens.strides[0]
        src = as_strided(tokens, (tokens.size - _ROW + 1, _ROW), (step, step), writeable=False)
        dst = as_strided(out, (out.size - _ROW + 1, _ROW), (step, step))
        dst[ld[owner] + at] = src[ls[owner] + at]  # fancy indexing (np.take would copy the strided view)
        short = ~long
        starts, lens, dest = starts[short], lens[short], dest[short]
    total = int(lens.sum())
    if total == 0:
        return
    within = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(lens) - lens, lens)
    pos = np.repeat(dest, lens) + within
    if (
        pos.size == out.size or pos[-1] - pos[0] + 1 == pos.size
    ):  # one contiguous run: gather straight into it
        np.take(tokens, np.repeat(starts, lens) + within, out=out[pos[0] : pos[-1] + 1], mode="wrap")
    else:
        out[pos] = np.take(tokens, np.repeat(starts, lens) + within, mode="wrap")
