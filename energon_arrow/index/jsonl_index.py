"""energon's index of a crude `.jsonl` dataset: `NAME.jsonl.idx` next to `NAME.jsonl`.

The index is little-endian uint64 byte offsets: the start of every sample (one JSON object per non-blank line)
followed by the file size, so sample i is bytes [idx[i], idx[i+1]) of the file. As in energon 7.4.1 a sample
starts where the previous line (blank or not) ends, the first one at byte 0, and every non-blank line must be
a JSON object (`{...}` after stripping whitespace). Offsets are computed chunk by chunk with numpy, so memory is
bounded by the chunk size plus 8 bytes per sample.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from energon_arrow.adapters import open_storage
from energon_arrow.adapters.urls import path_text

IJSONL_SUFFIX = ".jsonl.idx"
_WS = np.zeros(256, bool)
_WS[list(b" \t\n\r\x0b\x0c")] = True


class JsonlIndexError(ValueError):
    pass


def index_name(jsonl_name: str) -> str:
    if not jsonl_name.endswith(".jsonl"):
        raise JsonlIndexError(f"{jsonl_name}: a JSONL dataset file name must end with .jsonl")
    return jsonl_name[: -len(".jsonl")] + IJSONL_SUFFIX


def _nonblank_starts(buf: np.ndarray, base: int, where: str) -> np.ndarray:
    """Absolute start offsets of the non-blank lines of `buf` (whole lines; the last may lack its newline);
    checks that each is a JSON object."""
    ends = np.flatnonzero(buf == 10) + 1
    if not len(ends) or ends[-1] != len(buf):
        ends = np.r_[ends, len(buf)]
    starts = np.r_[0, ends[:-1]]
    solid = np.flatnonzero(~_WS[buf])
    first = np.searchsorted(solid, starts)
    last = np.searchsorted(solid, ends) - 1
    keep = first <= last
    head, tail = buf[solid[first[keep]]], buf[solid[last[keep]]]
    bad = np.flatnonzero((head != ord("{")) | (tail != ord("}")))
    if len(bad):
        raise JsonlIndexError(
            f"{where}: byte {base + int(starts[keep][bad[0]])}: a non-blank line does not start and end "
            "with a JSON object {...}"
        )
    return starts[keep] + base


def jsonl_offsets(chunks: Iterable[bytes], where: str = "jsonl") -> np.ndarray:
    """energon's `.jsonl.idx` offsets (uint64) of the file whose bytes `chunks` yields in order: the start of
    each non-blank line (the first sample starts at byte 0, whatever blank lines precede it), then the size."""
    found: list[np.ndarray] = []
    carry, pos = b"", 0  # the unfinished last line and its absolute offset
    for chunk in chunks:
        data = carry + bytes(chunk)
        cut = data.rfind(b"\n") + 1
        if cut:
            found.append(_nonblank_starts(np.frombuffer(data[:cut], np.uint8), pos, where))
        carry, pos = data[cut:], pos + cut
    if carry:
        found.append(_nonblank_starts(np.frombuffer(carry, np.uint8), pos, where))
    starts = np.concatenate(found) if found else np.zeros(0, np.int64)
    if not len(starts):
        raise JsonlIndexError(f"{where}: the file has no JSON lines (energon refuses empty files)")
    starts[0] = 0
    return np.r_[starts, pos + len(carry)].astype(np.uint64)


def prepare_jsonl(path, storage_options: dict | None = None) -> int:
    """Write `NAME.jsonl.idx` for the JSONL file at `path` (a local path, URL or EPath; atomically); returns the
    number of samples."""
    base, _, name = path_text(path).rstrip("/").rpartition("/")
    idx_name = index_name(name)
    storage = open_storage(base or ".", storage_options)
    offsets = jsonl_offsets(storage.iter_chunks(name), storage.url_of(name))
    storage.write_atomic(idx_name, offsets.astype("<u8").tobytes())
    return len(offsets) - 1


def read_jsonl_index(storage, name: str) -> np.ndarray:
    """The offsets of `name`'s index, checked against the file's size (a stale index is an error)."""
    idx_name = index_name(name)
    if not storage.exists(idx_name):
        raise JsonlIndexError(
            f"{storage.url_of(idx_name)}: no index for this JSONL dataset; run `energon-arrow prepare` "
            f"(or energon's prepare) on {storage.url_of(name)}"
        )
    raw = storage.read_bytes(idx_name)
    if len(raw) % 8 or len(raw) < 16:
        raise JsonlIndexError(f"{storage.url_of(idx_name)}: corrupt index ({len(raw)} bytes)")
    offsets = np.frombuffer(raw, "<u8").astype(np.int64)
    size = storage.stat(name).size
    if int(offsets[-1]) != size:
        raise JsonlIndexError(
            f"{storage.url_of(idx_name)}: the index ends at byte {int(offsets[-1])} but "
            f"{storage.url_of(name)} has {size} bytes; run prepare again"
        )
    return offsets
