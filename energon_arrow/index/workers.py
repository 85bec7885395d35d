"""Indexing many shards at once: forked processes for local shards; for object stores, download threads (one GET
per shard) feeding forked CPU processes.

`index_shards(storage, shards, num_workers, write_tar_idx=True)` yields
`(position, ShardIndex | TarFormatError)` in input order; `shard_indexes` merges them with the shards a prepare
reuses or resumes. Each good shard's `.tar.idx` is written next to it:
locally by the worker that read it (temporary name, then rename), on object stores in batches of concurrent PUTs.
Storage errors other than bad tar content propagate. On object stores the last `.tar.idx` uploads are awaited
(and their errors raised) when the consumer exhausts the iterator: consume it to the end.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import multiprocessing as mp
import os
from collections import deque
from collections.abc import Iterator

from energon_arrow.adapters.errors import classify
from energon_arrow.adapters.publish import put_objects
from energon_arrow.index.fingerprint import fingerprint_of_bytes, read_fingerprints
from energon_arrow.index.resume import WorkFolder
from energon_arrow.index.shard_read import index_streamed_checked, read_whole_checked
from energon_arrow.meta.tar_index import tar_index_bytes, tar_index_name
from energon_arrow.tar import TarFormatError, index_bytes, index_shard, reads_whole
from energon_arrow.tar.samples import ShardIndex


def index_one(
    storage, rel: str, size: int, write_tar_idx: bool, work_entry: str | None = None
) -> ShardIndex | TarFormatError:
    data = None
    try:
        if reads_whole(storage, size):  # one GET; the fingerprint's windows come from the same bytes
            data = read_whole_checked(storage, rel, size)
            result = index_bytes(data, storage.url_of(rel))
        else:
            result = (
                index_streamed_checked(storage, rel, size)
                if not storage.is_local
                else index_shard(storage, rel, size)
            )
    except TarFormatError as exc:
        return exc
    if data is not None and len(data) == size:
        result.fingerprint = fingerprint_of_bytes(data, size, result.data_end)
    else:  # a few small reads (5 ranged GETs per remote shard measured ~0.2 s of a 1 s prepare of 64 shards)
        result.fingerprint = read_fingerprints(storage, [(rel, size, result.data_end)])[0]
    if write_tar_idx:
        write_tar_index(storage, rel, result.tar_index())
    if work_entry is not None:  # after the .tar.idx: an entry means the shard is done
        WorkFolder(storage).save(work_entry, result)
    return result


def write_tar_index(storage, rel: str, offsets) -> None:
    """Write `<rel>.idx` next to the tar: temporary name, then rename (local) or one PUT (object stores).
    Local files are not fsynced: a crash leaves the old or the new complete file, which prepare rewrites. A local
    file that already holds these bytes is left as it is: reading 8 bytes per sample costs microseconds, while
    replacing it frees the old file's blocks (milliseconds per file on a disk mounted with `discard`)."""
    data = tar_index_bytes(offsets)
    if not storage.is_local:
        storage.write_atomic(tar_index_name(rel), data)
        return
    path = storage.local_path(tar_index_name(rel))
    if _holds(path, data):
        return
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise classify(exc, storage.url_of(tar_index_name(rel))) from None


def _holds(path: str, data: bytes) -> bool:
    """Whether the file at `path` holds exactly `data` (False when it is missing or unreadable)."""
    try:
        with open(path, "rb") as f:
            return f.read(len(data) + 1) == data
    except OSError:
        return False


def _can_fork() -> bool:
    return "fork" in mp.get_all_start_methods()


def _process_pool(workers: int):
    return cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("fork"))


class _RemoteIndexFiles:
    """`.tar.idx` uploads of an object store: batches of concurrent PUTs (one PUT per file), sent in the
    background while shards are still being read; `flush()` sends the last batch, `finish()` waits for all of
    them (and raises their errors)."""

    def __init__(self, storage, batch: int = 16):
        self.storage = storage
        self.batch = batch
        self.pending: dict[str, bytes] = {}
        self._uploader = cf.ThreadPoolExecutor(1, thread_name_prefix="ea-tar-idx")
        self._sent: list[cf.Future] = []

    def add(self, rel: str, offsets) -> None:
        self.pending[tar_index_name(rel)] = tar_index_bytes(offsets)
        if len(self.pending) >= self.batch:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self._sent.append(self._uploader.submit(put_objects, self.storage, self.pending))
            self.pending = {}

    def finish(self) -> None:
        self.flush()
        for fut in self._sent:
            fut.result()
        self._sent = []

    def close(self) -> None:
        self._uploader.shutdown(wait=True)


def index_shards(
    storage,
    shards: list[tuple[str, int]],
    num_workers: int,
    write_tar_idx: bool = True,
    work_entries: list[str] | None = None,
) -> Iterator[tuple[int, ShardIndex | TarFormatError]]:
    """`work_entries[i]`: where the worker keeps shard i's rows for a resumed prepare (`resume.WorkFolder`).
    The first shards are submitted before this returns, so that the caller's own set-up (imports, writers)
    overlaps their reading; `close()` the iterator if it is not consumed to the end."""
    scan = _scan(storage, shards, num_workers, write_tar_idx, work_entries)
    next(scan, None)  # runs up to the submission of the first shards
    return scan


def _scan(storage, shards, num_workers, write_tar_idx, work_entries):
    """index_shards' generator: yields None once the first shards are submitted, then the results."""
    if not shards:
        return
    entries = work_entries or [None] * len(shards)
    if num_workers <= 1 and storage.is_local:  # in-process
        yield None
        for i, (rel, size) in enumerate(shards):
            yield i, index_one(storage, rel, size, write_tar_idx, entries[i])
        return
    # bounded look-ahead: results are consumed in order. Remote: a short one, so that the consumer (index.sqlite
    # writer) is never far behind the downloads when they end; on a busy CPU the downloads then wait for it
    # instead of competing with it.
    window = max(2, 4 * num_workers) if storage.is_local else num_workers + 2
    remote_idx = _RemoteIndexFiles(storage) if write_tar_idx and not storage.is_local else None
    if storage.is_local:  # the worker that read a shard writes its `.tar.idx`
        pool = _process_pool(num_workers) if _can_fork() else cf.ThreadPoolExecutor(num_workers)
    else:  # threads: concurrent GETs on the shared async client (forked CPU workers measured slower)
        pool = cf.ThreadPoolExecutor(max(1, num_workers), thread_name_prefix="ea-fetch")
    in_worker = write_tar_idx and storage.is_local

    def submit(i, rel, size):
        return pool.submit(index_one, storage, rel, size, in_worker, entries[i])

    pending: deque = deque()
    try:
        it = iter(enumerate(shards))
        for i, (rel, size) in it:
            pending.append((i, submit(i, rel, size)))
            if len(pending) >= window:
                break
        yield None
        while pending:
            i, fut = pending.popleft()
            result = fut.result()
            nxt = next(it, None)
            if nxt is not None:
                j, (rel, size) = nxt
                pending.append((j, submit(j, rel, size)))
            if remote_idx is not None:
                if not isinstance(result, TarFormatError):
                    remote_idx.add(shards[i][0], result.tar_index())
                if not pending:  # the last shard: its batch goes up while the consumer finishes its work
                    remote_idx.flush()
            yield i, result
        if remote_idx is not None:
            remote_idx.finish()  # the consumer asked for more: every `.tar.idx` is written (or its error raised)
    finally:
        for _, fut in pending:
            fut.cancel()
        pool.shutdown(wait=True, cancel_futures=True)
        if remote_idx is not None:
            remote_idx.close()


def default_workers() -> int:
    return max(1, min(16, os.cpu_count() or 1))


def shard_indexes(storage, plan, scanned, result):
    """`(FileInfo, ShardIndex | TarFormatError)` of every shard of a prepare's `plan` in order: reused from the
    previous index, resumed from the work folder, or read now (`scanned`: `index_shards`' iterator); counts them in
    `result` (a PrepareResult)."""
    work = WorkFolder(storage)
    for f in plan.shards:
        if plan.reuse[f.path]:
            index = plan.previous.shard_rows(f.path)
            result.reused += 1
            if index.fingerprint is None:  # indexed by a version that did not record fingerprints
                index.fingerprint = read_fingerprints(storage, [(f.path, f.size, index.data_end)])[0]
        elif f.path in plan.resumed:
            index = work.load(f)
            if index is None:  # removed or torn since the listing: index it here
                index = index_one(storage, f.path, f.size, False)
                result.indexed += 1
            else:
                result.resumed += 1
        else:
            _, index = next(scanned)
            result.indexed += 1
            yield f, index
            continue
        if not isinstance(index, TarFormatError) and plan.files.get(tar_index_name(f.path)) != 8 * (
            index.sample_count + 1
        ):
            write_tar_index(storage, f.path, index.tar_index())
        yield f, index
