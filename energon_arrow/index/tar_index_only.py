"""`prepare --tar-index-only` (energon's): rewrite the `.tar.idx` of the shards listed in `.info.json`, and record
the digests of the rewritten files in the dataset's manifest (meta/manifest.py) where they changed, so that readers
that check `.tar.idx` against it accept what this step published."""

from __future__ import annotations

import time

from energon_arrow.index.discover import compile_exclude
from energon_arrow.index.prepare_result import BadShard, PrepareResult
from energon_arrow.index.workers import default_workers, index_shards
from energon_arrow.meta import INFO_JSON, read_info
from energon_arrow.meta.manifest import digest_of_bytes, manifest_of, update_manifest
from energon_arrow.meta.tar_index import tar_index_bytes, tar_index_name
from energon_arrow.tar import TarFormatError


def tar_index_only(storage, options, result, progress, start) -> PrepareResult:
    """energon's --tar-index-only: rewrite the `.tar.idx` of the shards listed in `.info.json`."""
    info = read_info(storage)
    names = list(info.shard_counts)
    if options.exclude:
        pattern = compile_exclude(options.exclude)
        names = [n for n in names if not pattern.search(n)]
    sizes = [(n, storage.stat(n).size) for n in names]
    workers = max(1, min(options.num_workers or default_workers(), len(sizes) or 1))
    if progress is not None:
        progress.start(len(sizes), sum(size for _, size in sizes))
    recorded = manifest_of(storage)
    changed = {}
    for i, index in index_shards(storage, sizes, workers):
        path, size = sizes[i]
        result.indexed += 1
        if isinstance(index, TarFormatError):
            if not options.skip_bad_shards:
                raise index
            result.bad_shards.append(BadShard(path, str(index)))
            continue
        if index.sample_count != info.shard_counts[path]:
            result.warnings.append(
                f"{path}: {index.sample_count} samples now, {info.shard_counts[path]} in {INFO_JSON}; "
                "run a full prepare to update the index"
            )
        if recorded is not None:
            rel = tar_index_name(path)
            digest = digest_of_bytes(tar_index_bytes(index.tar_index()))
            if recorded.files.get(rel) != digest:
                changed[rel] = digest
        result.shards += 1
        result.samples += index.sample_count
        result.parts += index.part_count
        result.bytes += size
        if progress is not None:
            progress.advance(path, index.sample_count, size)
    if changed:
        update_manifest(storage, changed)
    result.seconds = time.perf_counter() - start
    return result
