"""Dataset lint: read and decode every sample of the splits of a prepared dataset, the way the loader would, and
collect each failing sample with its shard, key, part and reason (energon's `energon lint`, in parallel).

Work is cut into row ranges of the split table (split order = shard order, so one range is one or a few shards'
consecutive samples); a range is fetched with one coalesced read per shard run (`SampleReader`), its parts are
sliced with the index's per-part offset arrays, and each sample is built by the dataset's `SampleBuilder` (the
loader's decoding: field map, crude part filter or sample_loader). Local datasets fan the ranges out to forked
worker processes that inherit the memory-mapped index; object stores use threads (the reads dominate).
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from energon_arrow.loader.assemble import located_samples, sample_parts
from energon_arrow.loader.batch_columns import SourceColumns
from energon_arrow.loader.builder import SampleBuilder
from energon_arrow.loader.errors import DecodeError
from energon_arrow.loader.reader import SampleReader
from energon_arrow.loader.source import SplitSource

CHUNK_ROWS = 1024


@dataclass(frozen=True)
class LintFailure:
    """One sample that does not load: where it is and why."""

    split: str
    shard: str  # shard path relative to the dataset root
    sample_index: int  # position of the sample in its shard
    byte_offset: int
    key: str | None
    part: str | None  # the part that failed to decode, None when the sample as a whole failed
    reason: str

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class IndexMismatch:
    """A shard whose .tar.idx does not agree with the sample count in .info.json (energon's index check)."""

    shard: str
    info_samples: int
    idx_samples: int | None  # None: the .tar.idx file is missing

    def as_dict(self) -> dict:
        return asdict(self)


def check_tar_indexes(storage, shard_counts: dict[str, int]) -> list[IndexMismatch]:
    """Compare every shard's `.tar.idx` (one uint64 per sample plus the end offset) with .info.json, from one
    listing of the dataset (no file is opened)."""
    sizes = {f.path: f.size for f in storage.scan("**/*.tar.idx")}
    out = []
    for shard, count in shard_counts.items():
        size = sizes.get(shard + ".idx")
        n = None if size is None else size // 8 - 1
        if n != count:
            out.append(IndexMismatch(shard, int(count), n))
    return out


def row_chunks(shard_id: np.ndarray, chunk_rows: int = CHUNK_ROWS) -> list[tuple[int, int]]:
    """[start, end) row ranges of at most `chunk_rows` rows that never span two shards."""
    n = len(shard_id)
    if n == 0:
        return []
    cuts = np.flatnonzero(np.asarray(shard_id[1:]) != np.asarray(shard_id[:-1])) + 1
    starts = np.r_[0, cuts]
    ends = np.r_[cuts, n]
    out = []
    for a, b in zip(starts.tolist(), ends.tolist()):
        out.extend((s, min(s + chunk_rows, b)) for s in range(a, b, chunk_rows))
    return out


def failure_reason(exc: BaseException) -> tuple[str | None, str]:
    if isinstance(exc, DecodeError):
        cause = exc.__cause__ or exc
        return exc.part, " ".join(f"{type(cause).__name__}: {cause}".split())
    return None, " ".join(f"{type(exc).__name__}: {exc}".split())


@dataclass
class BuiltSample:
    """One sample read from its shard: its parts as fetched, and the built sample or the exception building it."""

    row: int
    shard: str
    sample_index: int
    byte_offset: int
    key: str | None
    parts: dict
    sample: Any = None
    error: Exception | None = None


def iter_samples(
    src: SplitSource, builder: SampleBuilder, reader: SampleReader, start: int, end: int
) -> Iterator[BuiltSample]:
    """Rows [start, end) of `src` fetched in one coalesced read and built one by one, as the loader builds
    them; a sample that fails carries its exception instead of raising."""
    rows = np.arange(start, end, dtype=np.int64)
    views = reader.read(rows)
    shard_ids = src.shard_id[start:end].tolist()
    indices = src.sample_index[start:end].tolist()
    offsets = src.byte_offset[start:end].tolist()
    located = located_samples(
        SourceColumns(src), rows, views
    )  # each index column gathered once for the range
    for j, (row, view, sid, index, offset) in enumerate(
        zip(rows.tolist(), views, shard_ids, indices, offsets)
    ):
        shard = src.shard_paths[sid]
        out = BuiltSample(row, shard, int(index), int(offset), None, {})
        try:
            out.key, out.parts = located[j][:2] if located is not None else sample_parts(src, row, view)
            out.sample = builder.build(out.key, out.parts, shard, index, row)
        except Exception as exc:  # noqa: BLE001 - reported per sample by the callers
            out.error = exc
        yield out


def lint_rows(
    split: str, src: SplitSource, builder: SampleBuilder, reader: SampleReader, start: int, end: int
) -> tuple[int, list[LintFailure]]:
    """Build every sample of rows [start, end); (samples checked, failures)."""
    failures = []
    for s in iter_samples(src, builder, reader, start, end):
        if s.error is not None:
            part, reason = failure_reason(s.error)
            failures.append(LintFailure(split, s.shard, s.sample_index, s.byte_offset, s.key, part, reason))
    return end - start, failures


# (split name, source, builder) of the run; set before the workers fork so they inherit it
_JOBS: list[tuple[str, SplitSource, SampleBuilder]] = []
_READERS: dict[int, SampleReader] = {}


def _run_task(task: tuple[int, int, int]) -> tuple[int, list[LintFailure]]:
    job, start, end = task
    split, src, builder = _JOBS[job]
    reader = _READERS.get(job)
    if reader is None:
        reader = _READERS[job] = SampleReader(src)
    return lint_rows(split, src, builder, reader, start, end)


def lint_splits(
    jobs: list[tuple[str, SplitSource, SampleBuilder]],
    parallel: int,
    on_progress: Callable[[int, int], None] | None = None,
    chunk_rows: int = CHUNK_ROWS,
) -> Iterator[LintFailure]:
    """Lint every row of every job's split with `parallel` workers; yields failures in completion order and
    calls `on_progress(samples, failures)` after each range."""
    tasks = [(j, a, b) for j, (_, src, _) in enumerate(jobs) for a, b in row_chunks(src.shard_id, chunk_rows)]
    if not tasks:
        return
    _JOBS[:] = jobs
    _READERS.clear()
    local = all(src.storage.is_local for _, src, _ in jobs)
    parallel = max(1, min(parallel, len(tasks)))
    try:
        if parallel == 1:
            results: Iterator = map(_run_task, tasks)
            yield from _drain(results, on_progress)
        elif local and "fork" in multiprocessing.get_all_start_methods():
            with multiprocessing.get_context("fork").Pool(parallel) as pool:
                yield from _drain(pool.imap_unordered(_run_task, tasks), on_progress)
        else:
            with ThreadPoolExecutor(parallel) as pool:
                # one reader per thread: the readers' descriptor caches are not shared
                yield from _drain(pool.map(_threaded_task, tasks), on_progress)
    finally:
        for reader in _READERS.values():
            reader.close()
        _READERS.clear()
        _JOBS.clear()


def _threaded_task(task: tuple[int, int, int]) -> tuple[int, list[LintFailure]]:
    job, start, end = task
    split, src, builder = _JOBS[job]
    reader = SampleReader(src)
    try:
        return lint_rows(split, src, builder, reader, start, end)
    finally:
        reader.close()


def _drain(results, on_progress) -> Iterator[LintFailure]:
    for n, failures in results:
        if on_progress is not None:
            on_progress(n, len(failures))
        yield from failures
