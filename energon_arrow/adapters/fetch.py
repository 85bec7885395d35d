"""Reading byte ranges: coalescing plans per file, concurrent remote fetches with per-fetch retries."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from energon_arrow.adapters.errors import ObjectChanged, StorageError, TransientError, classify
from energon_arrow.adapters.ranges import coalesce_ranges, split_fetched
from energon_arrow.adapters.receive import ReceiveBuffer
from energon_arrow.adapters.retry import with_operation


def read_ranges(storage, rels: str | Sequence[str], offsets, sizes) -> list[memoryview]:
    """Many ranges at once, results in request order. Nearby ranges of a file are coalesced into one
    fetch; remote fetches run concurrently. `rels` is one path for all ranges, or one path per range."""
    offsets = np.asarray(offsets, np.int64)
    sizes = np.asarray(sizes, np.int64)
    n = offsets.size
    if isinstance(rels, str):
        names, inverse = [rels], np.zeros(n, np.int64)
    else:
        if len(rels) != n:
            raise ValueError(f"read_ranges: {len(rels)} paths for {n} ranges")
        uniq, inverse = np.unique(np.asarray(rels, dtype=object), return_inverse=True)
        names = uniq.tolist()
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(names) + 1))
    plans, fetch_rels, fetch_starts, fetch_ends = [], [], [], []
    for k, name in enumerate(names):
        idx = order[bounds[k] : bounds[k + 1]]
        plan = coalesce_ranges(offsets[idx], sizes[idx], storage.range_gap, storage.max_fetch)
        plans.append((idx, plan, len(fetch_rels)))
        fetch_rels += [name] * plan.starts.size
        fetch_starts.append(plan.starts)
        fetch_ends.append(plan.ends)
    if not fetch_rels:
        return []
    fetched = fetch_groups(storage, fetch_rels, np.concatenate(fetch_starts), np.concatenate(fetch_ends))
    out: list[Any] = [None] * n
    for idx, plan, base in plans:
        views = split_fetched(fetched[base : base + plan.starts.size], plan, sizes[idx])
        for i, view in zip(idx.tolist(), views):
            out[i] = view
    return out


def fetch_groups(storage, rels: list[str], starts, ends, pins: dict[str, str] | None = None) -> list:
    """Fetch [starts[i], ends[i]) of rels[i] for every i: remote ones concurrently, retrying transient
    failures of individual fetches per the policy; every fetch must come back whole. `pins` (path -> ETag,
    filled in as responses arrive) keeps several calls on one version of each object, e.g. the blocks of a
    stream; without it, one call's ranges are kept on one version."""
    starts = np.asarray(starts, np.int64)
    ends = np.asarray(ends, np.int64)
    if storage.is_local:
        results = _pread_many(storage, rels, starts.tolist(), ends.tolist())
    else:
        results = _fetch_remote(storage, rels, starts.tolist(), ends.tolist(), {} if pins is None else pins)
    for i, data in enumerate(results):
        want = int(ends[i] - starts[i])
        if len(data) != want:
            raise StorageError(
                storage.url_of(rels[i]),
                f"short read: wanted {want} bytes at offset {int(starts[i])}, got {len(data)}",
            )
    return results


def fetch_into(
    storage, rel: str, start: int, sink: ReceiveBuffer, pins: dict[str, str] | None = None
) -> None:
    """Fetch bytes [start, start + sink.size) of `rel` into `sink` as they arrive (adapters/receive.py), with
    the retries and ETag pins of `fetch_groups`; a retried GET resumes after the bytes already received. On
    failure the sink fails too (its waiters raise the error) and the error is raised."""
    try:
        end = start + sink.size
        if storage.is_local:
            sink.write(_pread_many(storage, [rel], [start], [end])[0])
        else:
            _fetch_remote(storage, [rel], [start], [end], {} if pins is None else pins, [sink])
        if not sink.complete:
            raise StorageError(
                storage.url_of(rel),
                f"short read: wanted {sink.size} bytes at offset {start}, got {sink.received}",
            )
    except BaseException as exc:
        sink.fail(exc)
        raise


def _pread_many(storage, rels: list[str], starts: list[int], ends: list[int]) -> list[bytes]:
    results: list[bytes] = []
    fd, fd_rel = None, None
    try:
        for rel, s, e in zip(rels, starts, ends):
            if rel != fd_rel:
                if fd is not None:
                    os.close(fd)
                    fd = None
                fd_rel = rel
                fd = os.open(storage.path_of(rel), os.O_RDONLY)
            results.append(os.pread(fd, e - s, s))
    except OSError as exc:
        raise classify(exc, storage.url_of(fd_rel or "")) from None
    finally:
        if fd is not None:
            os.close(fd)
    return results


def _fetch_remote(
    storage, rels: list[str], starts: list[int], ends: list[int], pins: dict, sinks: list | None = None
) -> list:
    """GET every range, retrying the failed ones. All ranges of one path come from one version of the object:
    the first ETag seen for a path (or the one already in `pins`) is sent as If-Match by every later request.
    With `sinks` (a ReceiveBuffer per range), bodies are received into them and a retry asks only for the bytes
    not received yet."""
    sinks = sinks or [None] * len(rels)
    paths = [storage.path_of(r) for r in rels]
    direct = storage._direct
    if direct is not None:
        get_many = functools.partial(_direct_get_many, direct)
    elif storage.protocol == "s3":
        get_many = functools.partial(_s3fs_get_many, storage.fs)
    else:
        get_many = functools.partial(_fsspec_get_many, storage.fs)
    results: list[Any] = [None] * len(rels)
    pending = list(range(len(rels)))
    started, failures = time.monotonic(), 0
    while pending:
        got = get_many([_request(paths[i], starts[i], ends[i], pins.get(rels[i]), sinks[i]) for i in pending])
        failed, first = [], None
        for i, value in zip(pending, got):
            if not isinstance(value, BaseException):
                results[i], etag = value
                if etag and pins.setdefault(rels[i], etag) != etag:  # unpinned requests that saw two versions
                    raise ObjectChanged(
                        storage.url_of(rels[i]),
                        f"the object changed while it was being read (ETag {pins[rels[i]]}, then {etag}); "
                        "read it again",
                    )
                continue
            err = classify(value, storage.url_of(rels[i]))
            if not isinstance(err, TransientError):
                raise with_operation(err, "GET", failures + 1) from None
            failed.append(i)
            first = first or err
        if not failed:
            break
        failures += 1
        pause = storage.retry.pause_after(failures, started)
        if pause is None:
            raise TransientError(
                first.url, f"GET: {first.reason}; {storage.retry.gave_up(failures, started)}"
            ) from None
        pending = failed
        time.sleep(pause)
    return results


def _request(path: str, start: int, end: int, etag: str | None, sink: ReceiveBuffer | None) -> tuple:
    """The GET of [start, end) of `path`, or of the part a sink has not received yet."""
    return (path, start if sink is None else start + sink.received, end, etag, sink)


# Each *_get_many takes (path, start, end, ETag or None, sink or None) requests and gives, for each, (bytes or
# the sink, ETag or None) or the exception of that request.


def _direct_get_many(client, requests: list[tuple]) -> list:
    return client.get_many([(*path.split("/", 1), *rest) for path, *rest in requests])


def _into_sinks(requests: list[tuple], got: list) -> list:
    """Whole bodies of a backend without streaming written into the requests' sinks."""
    out = []
    for (*_, sink), g in zip(requests, got):
        if sink is not None and not isinstance(g, BaseException):
            sink.write(g[0])
            g = (sink, g[1])
        out.append(g)
    return out


def _fsspec_get_many(fs, requests: list[tuple]) -> list:
    """Ranges from another fsspec store (memory://, ...): no ETags, so nothing is pinned."""
    paths, starts, ends, _, _ = zip(*requests)
    got = fs.cat_ranges(list(paths), list(starts), list(ends), on_error="return")
    return _into_sinks(requests, [g if isinstance(g, BaseException) else (g, None) for g in got])


_S3FS_CONCURRENCY = 64  # GETs in flight at once through s3fs's event loop


def _s3fs_get_many(fs, requests: list[tuple]) -> list:
    """Through s3fs's botocore client: cat_ranges can neither send If-Match nor tell the ETag of what it read."""
    import asyncio

    from fsspec.asyn import sync

    async def one(limit, path, start, end, etag, _sink):
        if end <= start:
            return b"", etag
        bucket, key = path.split("/", 1)
        kwargs = {"Range": f"bytes={start}-{end - 1}"}
        if etag:
            kwargs["IfMatch"] = f'"{etag}"'
        async with limit:
            try:
                resp = await fs._call_s3("get_object", Bucket=bucket, Key=key, **kwargs)
            except OSError as exc:
                if getattr(exc.__cause__, "response", {}).get("Error", {}).get("Code") == "InvalidRange":
                    return b"", etag  # the range starts at or beyond the end: an empty read
                raise
            try:
                data = await resp["Body"].read()
            finally:
                resp["Body"].close()
        return data, (resp.get("ETag") or "").strip('"') or None

    async def run():
        limit = asyncio.Semaphore(_S3FS_CONCURRENCY)
        return await asyncio.gather(*(one(limit, *r) for r in requests), return_exceptions=True)

    return _into_sinks(requests, sync(fs.loop, run))
