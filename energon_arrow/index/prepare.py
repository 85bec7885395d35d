"""`prepare_dataset`: index a WebDataset folder (local or object store) into energon's `.nv-meta` + side indexes.

Steps: discover shards (`discover.py`); reuse the rows of shards whose identity (size, mtime, ETag) matches the
previous side index, or whose size and content fingerprint do (copies, uploads), unless `force` (incremental
prepare); take the rows an interrupted prepare kept in `.nv-meta/.prepare-work` (`resume.py`, unless `force`);
index the others in parallel (`workers.py`, which also writes each shard's `.tar.idx` and work entry); insert the
rows into `index.sqlite` (unless `energon_index=False`) and stream the Parquet side indexes as shards complete, in
shard order; split shards (`meta.split`); publish `.nv-meta` as one set at the end (`Storage.publish_folder`)
with `arrow/manifest.json` (`meta.manifest`: size and SHA-256 of every published file, `.tar.idx` included; on
object stores one PUT after the `index.uuid` marker), then remove the work folder. Everything is built in a private temporary folder, so an error or an interrupt
leaves the previous `.nv-meta` as it was (and the work entries for the next run).

Bad shards (`TarFormatError`, duplicate keys across shards) fail the prepare, or with `skip_bad_shards` are left
out and reported in `PrepareResult.bad_shards`.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import posixpath
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

import pyarrow.compute as pc

from energon_arrow.adapters import StorageError, open_storage
from energon_arrow.adapters.publish import RemoteFolderUpload
from energon_arrow.index.build_dir import build_dir
from energon_arrow.index.discover import discover_shards
from energon_arrow.index.fingerprint import read_fingerprints
from energon_arrow.index.prepare_result import BadShard, PrepareResult
from energon_arrow.index.resume import WORK_DIR, WorkFolder
from energon_arrow.index.workers import default_workers, index_shards, shard_indexes
from energon_arrow.meta import (
    DATASET_YAML,
    INDEX_SQLITE,
    INDEX_UUID,
    INFO_JSON,
    META_DIR,
    SAMPLE_LOADER_PY,
    SPLIT_YAML,
    DatasetInfo,
    DatasetYaml,
    MetaError,
    SplitConfig,
    check_field_map,
    dataset_yaml_bytes,
    info_json_bytes,
    new_index_uuid,
    pattern_split,
    ratio_split,
    sample_loader_py,
    split_yaml_bytes,
    tar_index_bytes,
    tar_index_name,
    unmatched_parts,
)
from energon_arrow.meta import manifest as digests
from energon_arrow.tar import TarFormatError


@dataclass
class PrepareOptions:
    split_ratio: list[tuple[str, float]] | None = None  # from meta.parse_split_ratio
    split_parts: list[tuple[str, str]] | None = None  # from meta.parse_split_parts
    shuffle_tars: bool = False
    exclude: str | None = None
    num_workers: int = 0  # 0: one per CPU (at most 16)
    force: bool = False  # re-index every shard (no reuse of unchanged shards)
    skip_bad_shards: bool = False
    tar_index_only: bool = False
    dataset_yaml: DatasetYaml | None = None
    dataset_yaml_name: str = DATASET_YAML
    tmp_path: str | None = None  # where index.sqlite is built (default: inside the dataset for local roots)
    shuffle_seed: int = 42
    energon_index: bool = True  # False: no index.sqlite (energon's joins, aux: stores, key lookups fail)
    media_filter: object = (
        None  # energon_arrow.index.media_extract.MediaFilterConfig: media metadata in index.sqlite
    )
    shards: list[str] | None = None  # only these relative shard paths (energon's prepare_dataset `paths`)


class Progress(Protocol):
    """What prepare reports while it runs (the CLI draws a progress bar from it)."""

    def start(self, shards: int, nbytes: int) -> None: ...

    def advance(self, path: str, samples: int, nbytes: int) -> None: ...


Indexer = Callable[[object, list[tuple[str, int]], int], Iterator[tuple[int, object]]]


@dataclass
class Plan:
    """Which shards a prepare covers and which of them must be read (the rest reuse the previous rows)."""

    shards: list  # FileInfo, in tar_file_id order
    files: dict[str, int]  # every file below the root -> size
    previous: object  # SideIndex | None
    reuse: dict[str, bool]
    to_index: list[tuple[str, int]]
    removed: int
    resumed: set[str]  # shards whose rows an interrupted prepare left in the work folder
    work_entries: list[str]  # where the workers keep the rows of `to_index` (resume.WorkFolder)


def plan_prepare(storage, options: PrepareOptions) -> Plan:
    shards, files = discover_shards(storage, options.exclude)
    if options.shards is not None:
        found = {f.path: f for f in shards}
        missing = [p for p in options.shards if p not in found]
        if missing:
            raise MetaError(f"{storage.url}: no such .tar shards: {missing[:5]}")
        shards = [
            found[p] for p in dict.fromkeys(options.shards)
        ]  # in the given order, as energon numbers them
    if not shards:
        filesystem = not options.exclude and storage.exists(f"{META_DIR}/{INDEX_SQLITE}")
        raise MetaError(
            f"{storage.url}: no .tar shards found"
            + (f" (after --exclude {options.exclude!r})" if options.exclude else "")
            + (
                ": a filesystem dataset (media files and .nv-meta/index.sqlite) is prepared with prepare-media"
                if filesystem
                else ""
            )
        )
    if options.force:
        previous = None
    else:
        from energon_arrow.index.side_index import read_side_index

        previous = read_side_index(storage)
    reuse: dict[str, bool] = {}
    moved = []  # same size, other mtime/ETag: copied or uploaded shards are reused when their content is the same
    for f in shards:
        ident = previous.identity(f.path) if previous else None
        reuse[f.path] = ident is not None and ident == (f.size, f.mtime, f.etag)
        if ident is not None and not reuse[f.path] and ident[0] == f.size:
            data_end, fingerprint = previous.content(f.path)
            if fingerprint is not None:
                moved.append((f.path, f.size, data_end, fingerprint))
    if moved:
        now = read_fingerprints(storage, [(path, size, end) for path, size, end, _ in moved])
        for (path, _, _, recorded), current in zip(moved, now):
            reuse[path] = current == recorded
    removed = 0
    if previous is not None:
        current = {f.path for f in shards}
        removed = sum(1 for p in previous.shards.column("path").to_pylist() if p not in current)
    work = WorkFolder(storage)
    entries = set() if options.force else work.entries()  # --force-overwrite indexes every shard again
    resumed = {f.path for f in shards if not reuse[f.path] and work.name_of(f) in entries}
    todo = [f for f in shards if not reuse[f.path] and f.path not in resumed]
    to_index = [(f.path, f.size) for f in todo]
    return Plan(shards, files, previous, reuse, to_index, removed, resumed, [work.name_of(f) for f in todo])


def _split(names: list[str], options: PrepareOptions, result: PrepareResult) -> dict[str, list[str]]:
    if options.split_parts:
        split = pattern_split(names, options.split_parts)
        empty = unmatched_parts(split)
        if empty:
            patterns = {n: p for n, p in options.split_parts}
            raise MetaError(
                "--split-parts: no shard matches "
                + ", ".join(f"{n}:{patterns[n]!r}" for n in empty)
                + f" (patterns are regexes matched at the start of the shard path, e.g. {names[0]!r})"
            )
        return split
    if options.split_ratio:
        seed = options.shuffle_seed if options.shuffle_tars else None
        split = ratio_split(names, options.split_ratio, seed)
        for name, ratio in options.split_ratio:
            if ratio > 0 and not split[name]:
                result.warnings.append(
                    f"split {name!r} has ratio {ratio:g} but received no shard ({len(names)} shards in total; "
                    "splits are by whole shards)"
                )
        return split
    raise MetaError("a split is required: give --split-ratio or --split-parts")


def _meta_files(storage, options: PrepareOptions, counts, split, part_types) -> dict[str, bytes]:
    """`.info.json`, `split.yaml` and the dataset yaml (and a sample loader template) of `.nv-meta`."""
    files: dict[str, bytes] = {
        INFO_JSON: info_json_bytes(DatasetInfo(counts)),
        SPLIT_YAML: split_yaml_bytes(SplitConfig(split)),
    }
    if options.dataset_yaml is not None:
        if options.dataset_yaml.field_map is not None:
            check_field_map(options.dataset_yaml.sample_type, options.dataset_yaml.field_map, part_types)
        files[options.dataset_yaml_name] = dataset_yaml_bytes(options.dataset_yaml)
        if options.dataset_yaml.sample_loader and not storage.exists(f"{META_DIR}/{SAMPLE_LOADER_PY}"):
            files[SAMPLE_LOADER_PY] = sample_loader_py(options.dataset_yaml.sample_type, sorted(part_types))
    return files


def prepare_dataset(
    url,
    options: PrepareOptions | None = None,
    storage_options: dict | None = None,
    progress: Progress | None = None,
    indexer: Indexer | None = None,
    plan: Plan | None = None,
) -> PrepareResult:
    """Prepare the dataset at `url`. `indexer(storage, [(path, size)], workers)` replaces the local shard
    indexing (it must yield `(position, ShardIndex | TarFormatError)` in order; used by torchrun mode, with the
    `plan` its shards were indexed by: planning again would find them done in the work folder)."""
    options = options or PrepareOptions()
    start = time.perf_counter()
    storage = open_storage(url, storage_options)
    result = PrepareResult(root=storage.url)
    if options.tar_index_only:
        from energon_arrow.index.tar_index_only import tar_index_only

        return tar_index_only(storage, options, result, progress, start)
    if options.split_parts is None and options.split_ratio is None:
        raise MetaError("a split is required: give --split-ratio or --split-parts")
    if options.media_filter is not None and not options.energon_index:
        raise MetaError(
            "media metadata is kept in index.sqlite: it cannot be combined with energon_index=False"
        )
    plan = plan or plan_prepare(storage, options)
    result.removed = plan.removed
    result.energon_index = options.energon_index
    workers = options.num_workers or default_workers()
    workers = max(1, min(workers, len(plan.to_index) or 1))
    if progress is not None:
        progress.start(len(plan.shards), sum(f.size for f in plan.shards))
    build = build_dir(storage, options.tmp_path)
    side = scanned = sqlite = upload = remover = media = None
    try:
        if indexer is None:
            scanned = index_shards(storage, plan.to_index, workers, work_entries=plan.work_entries)
        else:
            scanned = indexer(storage, plan.to_index, workers)
        # imported once the first shards are being read: their imports (Parquet, SQLite: ~50 ms) overlap it
        from energon_arrow.index.side_index import SIDE_INDEX_NAMES, SideIndexWriter
        from energon_arrow.index.sqlite_pages import IndexSqliteWriter
        from energon_arrow.index.sqlite_writer import DuplicateKeyError

        if options.energon_index:
            sqlite = IndexSqliteWriter(os.path.join(build, INDEX_SQLITE))
            from energon_arrow.index.media_pass import media_pass  # light: imports no media reader

            media = media_pass(storage, build, options.media_filter, options.num_workers or default_workers())
        side = SideIndexWriter(build, plan.shards, energon_index=options.energon_index)
        counts: dict[str, int] = {}
        part_types: Counter = Counter()
        recorded: dict[str, digests.FileDigest] = {}  # the manifest's entries (paths relative to the root)
        for f, index in shard_indexes(storage, plan, scanned, result):
            if isinstance(index, TarFormatError):
                if not options.skip_bad_shards:
                    raise index
                result.bad_shards.append(BadShard(f.path, str(index)))
                continue
            try:
                if sqlite is not None:
                    sqlite.add_shard(len(counts), f.path, index)
            except DuplicateKeyError as exc:
                if not options.skip_bad_shards:
                    raise
                result.bad_shards.append(BadShard(f.path, str(exc)))
                continue
            side.add_shard(len(counts), f.path, f.size, f.mtime, f.etag, index)
            if media is not None:
                media.add_shard(f.path, index, plan.reuse[f.path])
            counts[f.path] = index.sample_count
            # the bytes every `.tar.idx` of the set holds (written now, or kept: reused and resumed shards)
            recorded[tar_index_name(f.path)] = digests.digest_of_bytes(tar_index_bytes(index.tar_index()))
            for row in pc.value_counts(index.part_names).to_pylist():
                part_types[row["values"]] += row["counts"]
            if progress is not None:
                progress.advance(f.path, index.sample_count, f.size)
        if not counts:
            raise MetaError(f"{storage.url}: no valid shard left to index ({len(result.bad_shards)} bad)")
        split = _split(list(counts), options, result)
        small = _meta_files(storage, options, counts, split, part_types)  # may raise: before any write
        files_out: dict[str, object] = {}
        with cf.ThreadPoolExecutor(1, thread_name_prefix="ea-sqlite") as pool:
            # index.sqlite's last pages and SQLite's check of the file (the GIL released) while the side index
            # is closed; an error of either waits for the other before it propagates
            # (and its digest, unless media metadata is added to it below)
            finished = pool.submit(_finish_sqlite, sqlite, media is None) if sqlite is not None else None
            side_files = side.close()
            side_tables, side = side.tables, None
            for name, path in side_files.items():
                recorded[f"{META_DIR}/{name}"] = digests.digest_of_file(path, chunk_crcs=True)
            if finished is not None:
                sqlite_digest = finished.result()
                sqlite = None
                files_out[INDEX_SQLITE] = os.path.join(build, INDEX_SQLITE)
        if media is not None:
            result.media = media.finish_into(files_out[INDEX_SQLITE], result.warnings)
            media = None
            sqlite_digest = digests.digest_of_file(files_out[INDEX_SQLITE])
        if INDEX_SQLITE in files_out:
            recorded[f"{META_DIR}/{INDEX_SQLITE}"] = sqlite_digest
        if not storage.is_local:  # the largest file goes up while the rest is written; the marker last
            upload = RemoteFolderUpload(storage, META_DIR)
            if INDEX_SQLITE in files_out:
                upload.add(INDEX_SQLITE, files_out[INDEX_SQLITE])
        files_out.update(side_files)
        if not options.energon_index:  # no index.sqlite: its UNIQUE constraint did not check the keys
            from energon_arrow.index.unique_keys import check_unique_keys  # imports DuckDB: only when needed

            check_unique_keys(os.path.join(build, SIDE_INDEX_NAMES["samples"]), list(counts))
        files_out.update(small)
        files_out[INDEX_UUID] = new_index_uuid()
        for name in (*small, INDEX_UUID):
            recorded[f"{META_DIR}/{name}"] = digests.digest_of_bytes(files_out[name])
        editable = {f"{META_DIR}/{name}" for name in small if name != INFO_JSON}  # split.yaml, dataset yaml
        manifest = digests.manifest_bytes(recorded, editable)
        if upload is not None:
            for name, content in files_out.items():
                if name not in (INDEX_SQLITE, INDEX_UUID):
                    upload.add(name, content)
        # exhausted: the last `.tar.idx` files are written (uploaded beside `.nv-meta`) before the index is published
        for _ in scanned:
            pass
        if not options.energon_index:  # an older index.sqlite would describe other rows
            storage.remove(f"{META_DIR}/{INDEX_SQLITE}")
        if upload is None:
            from energon_arrow.loader.row_index import LOCAL_REL, write_row_index

            # the stale row index and this run's work entries are not carried over; the old set is deleted on a
            # helper thread while the new row index is written (freeing its blocks is I/O, not CPU)
            drop = [posixpath.relpath(p, META_DIR) for p in (LOCAL_REL, WORK_DIR)]
            files_out[digests.MANIFEST_NAME] = manifest  # in the same swap: the set and its manifest at once
            old = storage.publish_folder(META_DIR, files_out, keep_existing=True, drop=drop, remove_old=False)
            digests.forget_manifest(storage)
            if old is not None:
                remover = threading.Thread(target=shutil.rmtree, args=(old, True), name="ea-remove-old")
                remover.start()
            # the loader's memory-mapped rows (a split opens in O(shards)), from the tables still in memory
            write_row_index(storage, side_tables)
        else:
            upload.finish(INDEX_UUID, files_out[INDEX_UUID])
            upload = None
            storage.write_atomic(digests.MANIFEST_REL, manifest)  # last: it vouches for the set
            digests.forget_manifest(storage)
        _clear_work(storage, result)
        _totals(result, plan.shards, counts, part_types, split)
    except BaseException:
        if upload is not None:
            upload.abort()
        if side is not None:
            side.abort()
        if sqlite is not None:
            sqlite.abort()
        if media is not None:
            media.abort()
        raise
    finally:
        if scanned is not None:
            scanned.close()
        shutil.rmtree(build, ignore_errors=True)
        if remover is not None:
            remover.join()
    result.seconds = time.perf_counter() - start
    return result


def _finish_sqlite(sqlite, with_digest: bool):
    """Finish index.sqlite (its last pages, SQLite's quick check) and hash it while it is in the page cache."""
    sqlite.finish()
    return digests.digest_of_file(sqlite.path) if with_digest else None


def _clear_work(storage, result: PrepareResult) -> None:
    """The work folder of this (and any interrupted) prepare, once the index is published."""
    try:
        WorkFolder(storage).clear()
    except StorageError as exc:
        result.warnings.append(f"could not remove the work folder {WORK_DIR} ({exc}); delete it by hand")


def _totals(result: PrepareResult, shards, counts: dict[str, int], part_types: Counter, split) -> None:
    sizes = {f.path: f.size for f in shards}
    result.shards = len(counts)
    result.samples = sum(counts.values())
    result.parts = sum(part_types.values())
    result.bytes = sum(sizes[p] for p in counts)
    result.part_types = dict(sorted(part_types.items()))
    result.splits = {k: len(v) for k, v in split.items()}
    result.split_samples = {k: sum(counts[s] for s in v) for k, v in split.items()}
