"""Media metadata of many files at once: the candidate parts of a shard (chosen from the index columns, without
reading), the metadata of a list of byte ranges of one file, and `MediaPool`, which runs those per shard (or per
batch of folder files) in forked processes for local data, threads for object stores (their reads are ranged GETs),
in order and with a bounded number in flight.

Rows come back as three lists (entry keys, metadata types, metadata JSON), energon's `media_metadata` columns.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import multiprocessing as mp
import os
import posixpath
from collections import deque

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from energon_arrow.index.media_extract import MediaError, MediaFilterConfig, MediaFilterStrategy, part_stream
from energon_arrow.index.media_metadata import serialize_media_metadata
from energon_arrow.tar.arrow import from_numpy

Rows = tuple[list[str], list[str], list[str]]


def entry_keys(index) -> pa.Array:
    """`<sample key>.<part>` of every part of a `ShardIndex` (energon's media entry keys)."""
    keys = index.sample_keys.cast(pa.string()).take(from_numpy(index.part_sample_index))
    return pc.binary_join_element_wise(keys, index.part_names.cast(pa.string()), ".")


def candidates(index, media_filter: MediaFilterConfig) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(entry keys, content offsets, sizes) of the parts of `index` that can be media by their names alone."""
    keys = entry_keys(index)
    if media_filter.strategy == MediaFilterStrategy.HEADER:
        mask = None
    elif media_filter.strategy == MediaFilterStrategy.EXTENSION:
        # the extension is the part name's: decide once per distinct part name
        names = index.part_names.cast(pa.string()).dictionary_encode()
        accept = media_filter.name_filter()
        verdict = np.array([accept("x." + n) for n in names.dictionary.to_pylist()], dtype=bool)
        mask = verdict[names.indices.to_numpy(zero_copy_only=False)] if len(verdict) else np.zeros(0, bool)
    else:
        accept = media_filter.name_filter()
        mask = np.fromiter((accept(k) for k in keys.to_pylist()), dtype=bool, count=len(keys))
    if mask is None:
        return keys.to_pylist(), index.part_offsets, index.part_sizes
    rows = np.flatnonzero(mask)
    return keys.take(from_numpy(rows)).to_pylist(), index.part_offsets[rows], index.part_sizes[rows]


@contextlib.contextmanager
def _preader(storage, rel: str):
    """`pread(offset, n)` on file `rel`: one descriptor locally, ranged reads on object stores."""
    if not storage.is_local:
        yield lambda offset, n: storage.read_range(rel, offset, n)
        return
    fd = os.open(storage.local_path(rel), os.O_RDONLY)
    try:
        yield lambda offset, n: os.pread(fd, n, offset)
    finally:
        os.close(fd)


def _extract_one(media_filter, name: str, pread, offset: int, size: int, where: str):
    try:
        return media_filter.extract(name, part_stream(pread, offset, size))
    except (ImportError, MediaError):
        raise
    except Exception as exc:  # Pillow errors other than "not an image" (a decompression bomb), I/O errors
        raise MediaError(f"{where}: cannot read the media metadata ({type(exc).__name__}: {exc})") from exc


def _append(rows: Rows, key: str, metadata) -> None:
    if metadata is not None:
        kind, text = serialize_media_metadata(metadata)
        rows[0].append(key)
        rows[1].append(kind.value)
        rows[2].append(text)


def shard_rows(storage, rel: str, names: list[str], offsets, sizes, media_filter: MediaFilterConfig) -> Rows:
    """The media rows of the parts `names` (entry keys) at `offsets` / `sizes` of shard `rel`."""
    rows: Rows = ([], [], [])
    with _preader(storage, rel) as pread:
        for name, offset, size in zip(names, offsets.tolist(), sizes.tolist()):
            where = f"{storage.url_of(rel)}: member {name!r} at byte {offset}"
            _append(rows, name, _extract_one(media_filter, name, pread, offset, size, where))
    return rows


def indexed_shard_rows(storage, rel: str, size: int, media_filter: MediaFilterConfig) -> Rows:
    """`shard_rows` of every candidate part of shard `rel`, read from its tar headers first."""
    from energon_arrow.tar import index_shard

    names, offsets, sizes = candidates(index_shard(storage, rel, size), media_filter)
    return shard_rows(storage, rel, names, offsets, sizes, media_filter)


def file_rows(storage, files: list[tuple[str, int]], media_filter: MediaFilterConfig) -> Rows:
    """The media rows of whole files (relative path, size): a filesystem dataset; the filter sees the file name."""
    rows: Rows = ([], [], [])
    for rel, size in files:
        with _preader(storage, rel) as pread:
            where = storage.url_of(rel)
            _append(rows, rel, _extract_one(media_filter, posixpath.basename(rel), pread, 0, size, where))
    return rows


class MediaPool:
    """Runs `fn(*args)` tasks (returning Rows) on `workers`: `submit` returns the rows of the tasks finished in
    submission order so far (blocking while `window` tasks are in flight), `drain` the rest."""

    def __init__(self, storage, workers: int, window: int | None = None):
        self.window = window or 4 * max(1, workers)
        if workers <= 1:
            self.pool = None
        elif storage.is_local and "fork" in mp.get_all_start_methods():
            self.pool = cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("fork"))
        else:
            self.pool = cf.ThreadPoolExecutor(workers, thread_name_prefix="ea-media")
        self.pending: deque = deque()

    def submit(self, fn, *args) -> list[Rows]:
        if self.pool is None:
            return [fn(*args)]
        self.pending.append(self.pool.submit(fn, *args))
        done = []
        while self.pending and (len(self.pending) >= self.window or self.pending[0].done()):
            done.append(self.pending.popleft().result())
        return done

    def drain(self):
        while self.pending:
            yield self.pending.popleft().result()

    def close(self) -> None:
        for fut in self.pending:
            fut.cancel()
        self.pending.clear()
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
