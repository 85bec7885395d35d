"""Token dataset checksums: the side file `PREFIX.crc` (docs/format.md, "Token checksums") and `verify="crc"`.

energon-arrow's writers (tokens/builder.py `TokenWriter`, so preprocess and merge too) record the CRC32C of every
CHUNK_BYTES piece of the `.bin` and of the whole `.idx`, computed as the bytes are written (`ChunkCrcs`,
`StreamCrc`: no second read), in a small versioned binary file published after the pair. Megatron-Core ignores
it; the `.bin/.idx` are unchanged.

64 KiB chunks: a remote read checks whole chunks, so every fetch is widened to chunk boundaries; a GPT sample
(2049 tokens: 4-8 KiB) then costs at most two 64 KiB chunks in one ranged GET (a 1 MiB chunk would fetch
~250x the bytes asked for on shuffled reads). The side file holds 4 bytes per 64 KiB (61 KiB per GiB of tokens),
less than the `.idx` for any mean sequence length under ~190 KiB, and is read whole when a dataset is opened.

`resolve_verify(storage, asked, remote)`: the constructor argument, else the storage option `verify` (or
ENERGON_ARROW_VERIFY), else the default: DEFAULT_REMOTE for remote datasets, "none" for local ones. A dataset
without a side file is read unverified, except when "crc" was asked for explicitly (an error).
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass

import numpy as np

from energon_arrow.adapters.errors import NotFound
from energon_arrow.adapters.io_settings import VERIFY_MODES
from energon_arrow.adapters.retry import reread_attempts
from energon_arrow.meta.manifest import IntegrityError
from energon_arrow.tar.crc import ChunkCrcs, StreamCrc, crc32c, first_bad_chunk, part_crcs

log = logging.getLogger(__name__)

MAGIC = b"EATOKCRC"
VERSION = 1
CHUNK_BYTES = 64 << 10
DEFAULT_REMOTE = "crc"  # remote reads are verified unless asked otherwise (docs/tokens.md, "Checksums")
_HEAD = struct.Struct("<8sIIQQII")  # magic, version, chunk bytes, .bin size, .idx size, .idx CRC32C, reserved
_TAIL = struct.Struct("<I")  # CRC32C of every byte before it


class ChecksumError(IntegrityError):
    """Token bytes that do not match the side file's CRC32C (after reading them again), or an unusable side file."""


def write_side_file(sink, chunks: ChunkCrcs, idx: StreamCrc) -> None:
    """Write the side file of a `.bin` (CRCs `chunks`) and its `.idx` (`idx`) to `sink` (not published)."""
    chunks.finish()
    own = StreamCrc()
    for piece in (
        _HEAD.pack(MAGIC, VERSION, chunks.chunk, chunks.size, idx.size, idx.value, 0),
        *(np.ascontiguousarray(a, "<u4").data for a in chunks.spool.chunks()),
    ):
        sink.write(piece)
        own.update(piece)
    sink.write(_TAIL.pack(own.value))


@dataclass(frozen=True)
class SideFile:
    url: str
    chunk: int
    bin_size: int
    idx_size: int
    idx_crc: int
    crcs: np.ndarray  # uint32, one per chunk of the .bin


def parse_side_file(data: bytes, url: str) -> SideFile | None:
    """The side file in `data`; None when its own CRC does not match (damaged); ChecksumError when it is of an
    unknown format or version."""
    if len(data) < _HEAD.size + _TAIL.size or data[:8] != MAGIC:
        raise ChecksumError(url, "not a token checksum file (no EATOKCRC header)")
    magic, version, chunk, bin_size, idx_size, idx_crc, _ = _HEAD.unpack_from(data)
    if version != VERSION:
        raise ChecksumError(
            url, f"checksum file version {version}; this energon-arrow reads version {VERSION}"
        )
    body = memoryview(data)[: len(data) - _TAIL.size]
    if crc32c(body) != _TAIL.unpack_from(data, len(body))[0]:
        return None
    count = -(-bin_size // chunk) if chunk else -1
    if chunk <= 0 or len(body) != _HEAD.size + 4 * count:
        raise ChecksumError(
            url, f"{len(data)} bytes do not hold the CRCs of {bin_size} bytes in {chunk}-byte chunks"
        )
    crcs = np.frombuffer(body, "<u4", count, _HEAD.size).astype(np.uint32)
    return SideFile(url, chunk, bin_size, idx_size, idx_crc, crcs)


def read_side_file(storage, name: str) -> SideFile | None:
    """The side file `name` of `storage`, None when there is none; a damaged read is read again."""
    url, reads = storage.url_of(name), 1
    try:
        side = parse_side_file(storage.read_bytes(name), url)
    except NotFound:
        return None
    if side is not None:
        return side
    for _ in reread_attempts(storage):
        side = parse_side_file(storage.read_bytes(name), url)
        reads += 1
        if side is not None:
            return side
    raise ChecksumError(url, f"its own CRC32C does not match in {reads} reads (damaged); {_ADVICE}")


_ADVICE = "restore the dataset from a good copy, or write it again (energon-arrow preprocess or merge)"


def resolve_verify(storage, asked: str | None, remote: bool) -> tuple[bool, bool]:
    """(verify?, asked for explicitly?) for a token dataset on `storage` (see the module docstring)."""
    mode, explicit = storage.io_settings.verify_mode(asked, DEFAULT_REMOTE if remote else "none")
    if mode not in VERIFY_MODES:
        raise ValueError(f"verify must be one of {', '.join(VERIFY_MODES)}, got {mode!r}")
    return mode == "crc", explicit


def no_side_file(crc_url: str, prefix: str, explicit: bool, from_environment: bool) -> None:
    """What a verified open of a dataset without side file does: an error when "crc" was asked for explicitly, a
    warning when it comes from ENERGON_ARROW_VERIFY, nothing for the default (such datasets load as before)."""
    why = (
        "verify='crc' needs this side file, which does not exist (the dataset was written by Megatron-Core or an "
        f"energon-arrow older than token checksums); `energon-arrow merge --output-prefix NEW {prefix}` writes a "
        "copy with one, verify='none' reads it unverified"
    )
    if explicit:
        raise ChecksumError(crc_url, why)
    if from_environment:
        log.warning("%s (ENERGON_ARROW_VERIFY=crc: reading it unverified)", why)


def check_sizes(side: SideFile, bin_size: int, idx_size: int) -> None:
    """A side file describing other sizes belongs to other files (rewritten by another tool): an error."""
    if (side.bin_size, side.idx_size) != (bin_size, idx_size):
        raise ChecksumError(
            side.url,
            f"describes a .bin of {side.bin_size} bytes and a .idx of {side.idx_size}, the files have {bin_size} "
            f"and {idx_size}: the dataset was rewritten without it; delete it (or pass verify='none') to read "
            "the dataset unverified",
        )


def idx_matches(side: SideFile, data) -> bool:
    return memoryview(data).nbytes == side.idx_size and crc32c(data) == side.idx_crc


def check_idx(side: SideFile, data, bin_size: int, idx_url: str) -> None:
    """Check a local .idx (`data`) against the side file: ChecksumError when it differs."""
    check_sizes(side, bin_size, memoryview(data).nbytes)
    if not idx_matches(side, data):
        raise _idx_mismatch(side, idx_url, crc32c(data), 1)


def read_idx(storage, name: str, side: SideFile | None, bin_size: int) -> bytes:
    """The .idx `name` of `storage`; with a side file, a read that does not match is read again (the storage's
    retry policy), then ChecksumError."""
    data = storage.read_bytes(name)
    if side is None:
        return data
    check_sizes(side, bin_size, len(data))
    reads = 1
    if idx_matches(side, data):
        return data
    for _ in reread_attempts(storage):
        data = storage.read_bytes(name)
        reads += 1
        if idx_matches(side, data):
            return data
    raise _idx_mismatch(side, storage.url_of(name), crc32c(data), reads)


def _idx_mismatch(side: SideFile, idx_url: str, got: int, reads: int) -> ChecksumError:
    return ChecksumError(
        idx_url,
        f"CRC32C {got:08x}, {side.url} records {side.idx_crc:08x} ({reads} read(s)); damaged on the way or on "
        f"the storage: {_ADVICE}",
    )


def bad_chunk(side: SideFile, buffer, start: int) -> int:
    """The first chunk of `buffer` (the .bin's bytes from `start`, a chunk boundary, to a chunk boundary or the
    file's end) whose CRC differs from the side file's; -1 when all match."""
    return first_bad_chunk(buffer, start, side.chunk, side.crcs)


def chunk_mismatch(side: SideFile, bin_url: str, chunk: int, reads: int) -> ChecksumError:
    start = chunk * side.chunk
    end = min(side.bin_size, start + side.chunk)
    return ChecksumError(
        bin_url,
        f"chunk {chunk} (bytes [{start}, {end})) does not match its CRC32C in {side.url} ({reads} read(s)); "
        f"damaged on the way or on the storage: {_ADVICE}",
    )


class LocalChunks:
    """The chunks of a memory-mapped `.bin` (`data`: its bytes), each checked the first time a read touches it."""

    def __init__(self, side: SideFile, data: np.ndarray, bin_url: str):
        self.side, self.data, self.bin_url = side, data, bin_url
        self.seen = np.zeros(side.crcs.size, bool)

    def check(self, starts: np.ndarray, ends: np.ndarray) -> None:
        """Check the chunks of byte ranges [starts[i], ends[i]) not checked before; ChecksumError on a mismatch."""
        keep = ends > starts
        first, last = starts[keep] // self.side.chunk, (ends[keep] - 1) // self.side.chunk
        counts = last - first + 1
        total = int(counts.sum())
        if not total:
            return
        ks = np.repeat(first, counts) + np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
        ks = np.unique(ks)
        ks = ks[~self.seen[ks]]
        if not ks.size:
            return
        offsets = ks * self.side.chunk
        got = part_crcs(self.data, offsets, np.minimum(self.side.chunk, self.side.bin_size - offsets))
        wrong = ks[got != self.side.crcs[ks]]
        if wrong.size:
            raise chunk_mismatch(self.side, self.bin_url, int(wrong[0]), 1)
        self.seen[ks] = True
