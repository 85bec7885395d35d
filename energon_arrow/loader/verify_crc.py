"""`verify="crc"`: every part payload the loader reads is checked against the CRC32C that prepare recorded.

Asked for by the loader argument (`LoaderSettings.verify`, energon API `verify=`) or, when that is not given, the
storage option `verify` (or ENERGON_ARROW_VERIFY); off by default. `resolve_verify(src, asked)` decides it per
source: a source without checksums (prepared by energon, or by an energon-arrow before they were recorded) is an
error when "crc" was asked for explicitly, and a logged warning when it comes from the environment variable.

`VerifiedReader(reader, src)` wraps a source's reader (loader/reader.py): after each batch is read, the CRCs of
its parts, one `tar.crc.part_crcs` call per fetched buffer (window or run; no copy), are compared with the row
index's crc file. A sample with a mismatch is read again on its own, straight from the storage, and checked again, until
it matches or the storage's retry budget (`retries`, `retry_deadline_s`) is spent: then `ChecksumError` names the
shard URL, sample key, part, byte offset and both CRCs.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from energon_arrow.adapters.fetch import fetch_groups
from energon_arrow.adapters.io_settings import VERIFY_MODES
from energon_arrow.loader.batch_columns import SourceColumns
from energon_arrow.loader.errors import LoaderError
from energon_arrow.loader.spans import Spans
from energon_arrow.tar.crc import part_crcs

log = logging.getLogger(__name__)


class ChecksumError(LoaderError):
    """A part's bytes did not match the CRC32C recorded by prepare, on every read the retry budget allowed."""


def resolve_verify(src, asked: str | None) -> bool:
    """Whether the reads of `src` are verified: `asked` (the loader argument; None: not given) wins over the
    storage option / environment variable of the source's storage."""
    mode, explicit = src.storage.io_settings.verify_mode(asked)
    if mode not in VERIFY_MODES:
        raise LoaderError(f"verify must be one of {', '.join(VERIFY_MODES)}, got {mode!r}")
    if mode == "none":
        return False
    if src.part_crcs is None and src.rowmap is None:
        raise LoaderError(
            f"{src.name}: verify='crc' checks the samples of prepared WebDatasets; this source (JSONL, joined or "
            "built from a table) has no recorded checksums"
        )
    if src.part_crcs is None:
        why = (
            f"{src.name}: verify='crc' needs the CRC32C of every part, and this dataset has no checksums (prepared "
            f"by energon, or by an energon-arrow older than them); record them with "
            f"`energon-arrow prepare {src.storage.url}`"
        )
        if explicit:
            raise LoaderError(why)
        log.warning("%s (ENERGON_ARROW_VERIFY=crc: reading it unverified)", why)
        return False
    return True


class VerifiedReader:
    """A source reader whose batches are checked part by part (see the module docstring)."""

    def __init__(self, reader, src, on_mismatch=None):
        """`on_mismatch(shard)`: called when a sample of shard `shard` came back wrong (a cached copy is dropped)."""
        self.reader, self.src = reader, src
        self.cols = SourceColumns(src)
        self.on_mismatch = on_mismatch
        self.names = [n for n in src.parts or {} if n in src.part_crcs]

    def announce(self, rows: np.ndarray) -> None:
        self.reader.announce(rows)

    def close(self) -> None:
        self.reader.close()

    def read(self, rows: np.ndarray):
        data = self.reader.read(rows)
        rows = np.asarray(rows, np.int64)
        if not len(rows):
            return data
        cols = self.cols.batch(rows)
        bad = self._mismatches(data, cols, np.arange(len(rows)))
        if not bad:
            return data
        return self._read_again(data, cols, bad)

    def _mismatches(self, data, cols, which: np.ndarray) -> list[tuple[int, str, int, int]]:
        """(sample position, part, recorded CRC, actual CRC) of every part of samples `which` that differs."""
        if isinstance(data, Spans):
            views, buf, start = [memoryview(b) for b in data.buffers], data.buf, data.start
        else:  # one view per sample
            views, buf, start = (
                [memoryview(v) for v in data],
                np.arange(len(data)),
                np.zeros(len(data), np.int64),
            )
        out = []
        try:
            for name in self.names:
                off, size = cols.part(name)
                crc = cols.part_crc(name)
                have = which[off[which] >= 0]
                lo, n, bufs = start[have] + off[have], size[have], buf[have]
                got = np.empty(len(have), np.uint32)
                for b in np.unique(bufs).tolist():  # one call per fetched buffer (tar/crc.py part_crcs)
                    sel = np.flatnonzero(bufs == b)
                    got[sel] = part_crcs(views[b], lo[sel], n[sel])
                want = crc[have].astype(np.uint32)
                for k in np.flatnonzero(got != want).tolist():
                    out.append((int(have[k]), name, int(want[k]), int(got[k])))
        finally:
            for v in views:
                v.release()  # a window may be a mapping closed later: no view of it may outlive the check
        return out

    def _read_again(self, data, cols, bad):
        """Read the samples of `bad` again from the storage until they match (then they replace the bad ones
        in `data`), or raise ChecksumError when the retry budget is spent."""
        src, storage = self.src, self.src.storage
        offset, size = cols.span()
        shard = cols.shard
        started, failures = time.monotonic(), 0
        if self.on_mismatch is not None:
            for s in {int(shard[i]) for i, *_ in bad}:
                self.on_mismatch(s)
        while bad:
            failures += 1
            pause = storage.retry.pause_after(failures, started)
            if pause is None:
                i, name, want, got = bad[0]
                off, part_size = cols.part(name)
                raise ChecksumError(
                    f"{storage.url_of(src.shard_paths[int(shard[i])])}: sample {cols.keys()[i]!r} part {name!r}: "
                    f"{int(part_size[i])} bytes at offset {int(offset[i] + off[i])} have CRC32C "
                    f"{got:08x}, the side index records {want:08x} ({len(bad)} part(s) of this batch wrong); "
                    f"{storage.retry.gave_up(failures, started)} reading the sample again (corrupted on the way "
                    f"or on the storage; if the shard was rewritten, run `energon-arrow prepare {storage.url}`)"
                )
            which = np.array(sorted({i for i, *_ in bad}), np.int64)
            log.warning(
                "%s: %d part(s) of %d sample(s) did not match their CRC32C; reading them again (try %d)",
                src.name, len(bad), len(which), failures + 1,
            )  # fmt: skip
            time.sleep(pause)
            fresh = fetch_groups(
                storage,
                [src.shard_paths[int(s)] for s in shard[which].tolist()],
                offset[which],
                offset[which] + size[which],
            )
            data = _replaced(data, which, fresh)
            bad = self._mismatches(data, cols, which)
        return data


def _replaced(data, which: np.ndarray, fresh: list):
    """`data` (Spans or a list of views) with samples `which` taken from the buffers `fresh` (one per sample)."""
    if not isinstance(data, Spans):
        out = list(data)
        for i, b in zip(which.tolist(), fresh):
            out[i] = memoryview(b)
        return out
    base = len(data.buffers)
    buf, start = data.buf.copy(), data.start.copy()
    buf[which] = base + np.arange(len(which))
    start[which] = 0
    return Spans([*data.buffers, *fresh], buf, start, data.size)
