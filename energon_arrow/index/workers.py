"""Indexing many shards at once: processes for local shards, threads (concurrent streams) for object stores.

`index_shards(storage, shards, num_workers, write_tar_idx=True, shard_ids=None, scratch=None)` yields `(position, ShardIndex | TarFormatError)`
in input order; each successful shard's `.tar.idx` is written next to it atomically by the worker that read it.
Storage errors other than bad tar content propagate.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import multiprocessing as mp
import os
from collections import deque
from collections.abc import Iterator

from energon_arrow.adapters.errors import classify
from energon_arrow.index.sqlite_writer import scratch_writer
from energon_arrow.meta.tar_index import tar_index_bytes, tar_index_name
from energon_arrow.tar import TarFormatError, index_shard
from energon_arrow.tar.samples import ShardIndex


def index_one(
    storage, rel: str, size: int, write_tar_idx: bool, shard_id: int, scratch: str | None
) -> ShardIndex | TarFormatError:
    try:
        result = index_shard(storage, rel, size)
    except TarFormatError as exc:
        return exc
    if write_tar_idx:
        write_tar_index(storage, rel, result.tar_index())
    if scratch is not None:
        scratch_writer(scratch).add(shard_id, result)
    return result


def write_tar_index(storage, rel: str, offsets) -> None:
    """Write `<rel>.idx` next to the tar: temporary name, then rename (local) or one PUT (object stores).
    Local files are not fsynced: a crash leaves the old or the new complete file, which prepare rewrites."""
    data = tar_index_bytes(offsets)
    if not storage.is_local:
        storage.write_atomic(tar_index_name(rel), data)
        return
    path = storage.local_path(tar_index_name(rel))
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise classify(exc, storage.url_of(tar_index_name(rel))) from None


def _pool(storage, num_workers: int):
    if storage.is_local and num_workers > 1:
        ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else None
        return cf.ProcessPoolExecutor(num_workers, mp_context=ctx)
    return cf.ThreadPoolExecutor(max(1, num_workers), thread_name_prefix="ea-index")


def index_shards(
    storage,
    shards: list[tuple[str, int]],
    num_workers: int,
    write_tar_idx: bool = True,
    shard_ids: list[int] | None = None,
    scratch: str | None = None,
) -> Iterator[tuple[int, ShardIndex | TarFormatError]]:
    """With `scratch`, each shard's rows also go to the indexing process's scratch database (`sqlite_writer`)
    under `shard_ids[i]`."""
    if not shards:
        return
    ids = shard_ids if shard_ids is not None else list(range(len(shards)))
    if num_workers <= 1 and storage.is_local:
        for i, (rel, size) in enumerate(shards):
            yield i, index_one(storage, rel, size, write_tar_idx, ids[i], scratch)
        return
    window = max(2, 4 * num_workers)  # bounded look-ahead: results are consumed in order
    pool = _pool(storage, num_workers)
    pending: deque = deque()
    try:
        it = iter(enumerate(shards))
        for i, (rel, size) in it:
            pending.append((i, pool.submit(index_one, storage, rel, size, write_tar_idx, ids[i], scratch)))
            if len(pending) >= window:
                break
        while pending:
            i, fut = pending.popleft()
            result = fut.result()
            nxt = next(it, None)
            if nxt is not None:
                j, (rel, size) = nxt
                pending.append(
                    (j, pool.submit(index_one, storage, rel, size, write_tar_idx, ids[j], scratch))
                )
            yield i, result
    finally:
        for _, fut in pending:
            fut.cancel()
        pool.shutdown(wait=True, cancel_futures=True)


def default_workers() -> int:
    return max(1, min(16, os.cpu_count() or 1))
