"""The loader's row index: every sample of a dataset as memory-mapped arrays, built once and cached.

Rows are the dataset's samples in (shard_id, sample_index) order, so the row of sample i of shard s is
`shard_starts[s] + i` and a split is a list of row runs (loader/split_rows.py). Files of one row index folder:

- `manifest.json`: version, row and shard counts, part names, the size of every other file of the folder, and
  the identity of the side index it was built from (a rebuilt side index makes the folder stale): the SHA-256 of
  its files from the dataset's manifest (`meta.manifest`) when it has one, else their size and mtime / ETag;
- `shard_starts.npy`: int64 [shards + 1], cumulative sample counts;
- `rows.npy`: int64 [rows, 2], byte_offset and byte_size of each sample (headers included);
- `part-<i>.npy`: int64 [rows, 2] per part name (manifest order): payload offset relative to byte_offset (-1
  when the sample lacks the part) and payload size;
- `key_offsets.npy` (int64 [rows + 1]) and `key_data.bin` (UTF-8): the sample keys as an Arrow large string array;
- `crc-<i>.npy`: uint32 [rows] per part name, the CRC32C of its payload (0 where the sample lacks it), when every
  part of the side index has one (`manifest["checksums"]`; prepared by energon or an older energon-arrow: none).

Where: `<dataset>/.nv-meta/arrow/loader/` for a local dataset (prepare writes it; a loader builds it there on first
use when the folder is writable), else a node-local cache folder `$ENERGON_ARROW_CACHE/rows/<digest>/` (default
~/.cache/energon-arrow/rows). The build streams the side index in record batches (bounded memory) into a private
temporary folder that is renamed into place, so readers never see a partial index. The first build takes an
exclusive lock on `<folder>.lock` (`build_lock`): ranks and processes of one node opening the dataset together
wait for the one that builds it, then map its result.

Never poisoned: with a dataset manifest the build reads `samples.parquet` and `parts.parquet` whole and checks
them against it first (`index.side_index.open_verified_parquet`: a damaged response is fetched again, a damaged
file is an IntegrityError), so a folder holds only rows of files that matched the digests naming it. A folder
that fails its own check (unreadable or missing manifest, a file of another size, arrays that disagree) is
rebuilt, not used.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from energon_arrow.adapters import Storage, StorageError
from energon_arrow.index.schema import SIDE_INDEX_DIR
from energon_arrow.loader.errors import LoaderError
from energon_arrow.tar.arrow import ints_to_numpy

ROW_INDEX_VERSION = 2  # 2: crc-<i>.npy
LOCAL_REL = f"{SIDE_INDEX_DIR}/loader"
_BATCH_ROWS = 1 << 20


@dataclass
class RowIndex:
    """The mapped arrays of one dataset's row index (see the module docstring)."""

    shard_starts: np.ndarray
    rows: np.ndarray
    parts: dict[str, np.ndarray]
    key_offsets: np.ndarray
    key_data: np.ndarray
    folder: str
    crcs: dict[str, np.ndarray] | None = None  # part name -> CRC32C per row; None: the dataset records none

    def __len__(self) -> int:
        return int(self.shard_starts[-1])

    def keys(self) -> pa.LargeStringArray:
        """Every sample key, zero-copy over the mapped files."""
        n = len(self)
        return pa.LargeStringArray.from_buffers(
            n, pa.py_buffer(self.key_offsets), pa.py_buffer(self.key_data)
        )

    def maps(self) -> list[np.ndarray]:
        """The memory-mapped arrays (release_pages drops their resident pages)."""
        return [self.rows, *self.parts.values(), *(self.crcs or {}).values(), self.key_offsets, self.key_data]


def default_cache_dir() -> str:
    """$ENERGON_ARROW_CACHE/rows, else ~/.cache/energon-arrow/rows."""
    root = os.environ.get("ENERGON_ARROW_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "energon-arrow"
    )
    return os.path.join(root, "rows")


def side_identity(storage: Storage, in_memory: bool) -> list[str]:
    """What identifies the side index a row index is built from: the SHA-256 of the Parquet files recorded in the
    dataset's manifest, else the Parquet files' (or, for an index.sqlite converted in memory, that file's) size and
    mtime / ETag; and the dataset's index.uuid."""
    from energon_arrow.index.from_sqlite import SQLITE_REL
    from energon_arrow.meta.manifest import manifest_of
    from energon_arrow.meta.uuid_file import read_index_uuid

    rels = (
        [SQLITE_REL]
        if in_memory
        else [f"{SIDE_INDEX_DIR}/{n}.parquet" for n in ("shards", "samples", "parts")]
    )
    manifest = None if in_memory else manifest_of(storage)
    if manifest is not None and all(manifest.digest(rel) for rel in rels):
        ids = [f"{rel}=sha256:{manifest.digest(rel)}" for rel in rels]
    else:
        ids = [f"{rel}={storage.stat(rel).identity}" for rel in rels]
    return ids + [f"uuid={read_index_uuid(storage)}"]


def _load(folder: str, identity: list[str], shard_count: int) -> RowIndex | None:
    """The row index in `folder` when it exists and was built from the side index `identity`, else None."""
    try:
        with open(os.path.join(folder, "manifest.json")) as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        return None
    if (
        not isinstance(manifest, dict)
        or manifest.get("version") != ROW_INDEX_VERSION
        or manifest.get("source") != identity
        or manifest.get("shards") != shard_count
    ):
        return None
    try:
        return _map(folder, manifest)
    except (OSError, ValueError, KeyError, TypeError, IndexError):  # truncated, missing or damaged: rebuild
        return None


def _map(folder: str, manifest: dict) -> RowIndex | None:
    """The mapped arrays of a folder whose manifest matched, None when they fail the folder's own checks."""
    for name, size in (manifest.get("files") or {}).items():  # recorded since the cache checks itself
        if os.path.getsize(os.path.join(folder, name)) != size:
            return None

    def npy(name: str) -> np.ndarray:
        return np.load(os.path.join(folder, name), mmap_mode="r")

    n = int(manifest["rows"])
    offsets = npy("key_offsets.npy")
    chars = int(offsets[-1])
    data = np.memmap(os.path.join(folder, "key_data.bin"), np.uint8, "r") if chars else np.zeros(0, np.uint8)
    parts = {name: npy(f"part-{i}.npy") for i, name in enumerate(manifest["parts"])}
    crcs = (
        {name: npy(f"crc-{i}.npy") for i, name in enumerate(manifest["parts"])}
        if manifest["checksums"]
        else None
    )
    index = RowIndex(npy("shard_starts.npy"), npy("rows.npy") if n else np.zeros((0, 2), np.int64), parts,
                     offsets, data, folder, crcs)  # fmt: skip
    if (
        len(index) != n
        or len(index.rows) != n
        or len(offsets) != n + 1
        or int(offsets[0]) != 0
        or len(data) != chars
        or len(index.shard_starts) != manifest["shards"] + 1
        or any(len(p) != n for p in parts.values())
        or (crcs is not None and any(len(c) != n for c in crcs.values()))
    ):
        return None
    return index


def open_row_index(
    storage: Storage, shards: pa.Table, tables: dict[str, pa.Table], published: bool = True
) -> RowIndex:
    """The dataset's row index, built on first use. `shards`: the side index's shards table; `tables`: its
    samples and parts tables when they are in memory (converted from index.sqlite; built from them), else {};
    `published`: the Parquet side index exists in the dataset (it identifies the row index), else index.sqlite
    does (converted in memory only)."""
    in_memory = not published
    identity = side_identity(storage, in_memory)
    counts = ints_to_numpy(shards.column("sample_count"))
    folders = []
    if storage.is_local and not in_memory:
        folders.append(storage.local_path(LOCAL_REL))
    digest = hashlib.sha256(json.dumps([storage.url, identity]).encode()).hexdigest()[:32]
    folders.append(os.path.join(default_cache_dir(), digest))
    for folder in folders:
        index = _load(folder, identity, len(counts))
        if index is not None:
            return index
    last: Exception | None = None
    for folder in folders:
        try:
            with build_lock(folder):  # other ranks / processes of this node wait here, then map its result
                index = _load(folder, identity, len(counts))
                if index is None:
                    build_row_index(storage, counts, tables, folder, identity)
                    index = _load(folder, identity, len(counts))
        except (
            StorageError
        ):  # reading the dataset failed (or did not match its manifest): not a place problem
            raise
        except OSError as exc:  # not writable: try the next place
            last = exc
            continue
        if index is not None:
            return index
    raise LoaderError(f"{storage.url}: cannot write the loader's row index to {folders} ({last})")


def write_row_index(storage: Storage, tables: dict[str, pa.Table] | None = None) -> str:
    """Build the row index of a local dataset prepared with a Parquet side index into `.nv-meta/arrow/loader/`
    (prepare calls this after publishing the side index, with `tables`: the published samples and parts tables
    when it still holds them, which saves reading them back). Returns the folder."""
    from energon_arrow.query.sideindex import load_side_index

    side = load_side_index(storage, publish=True)
    if side.source == "index.sqlite (converted, in memory)":
        raise LoaderError(f"{storage.url}: the side index could not be published; no row index written")
    folder = storage.local_path(LOCAL_REL)
    counts = ints_to_numpy(side.tables["shards"].column("sample_count"))
    tables = tables or {k: v for k, v in side.tables.items() if k != "shards"}
    with build_lock(folder):
        build_row_index(storage, counts, tables, folder, side_identity(storage, False))
    return folder


@contextmanager
def build_lock(folder: str) -> Iterator[None]:
    """Hold an exclusive `flock` on `<folder>.lock` (created beside the row index folder): one process of a node
    builds a row index while the others wait. The kernel releases the lock when its holder dies, so a killed
    builder never blocks the next one (which then builds: the killed one's temporary folder never became the
    index, and is removed as abandoned)."""
    import fcntl

    os.makedirs(os.path.dirname(folder), exist_ok=True)
    fd = os.open(folder + ".lock", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _batches(storage: Storage, tables: dict[str, pa.Table], name: str, columns: list[str]) -> Iterator:
    if name in tables:
        present = set(tables[name].schema.names)
        yield from (
            tables[name].select([c for c in columns if c in present]).to_batches(max_chunksize=_BATCH_ROWS)
        )
        return
    import pyarrow.parquet as pq

    from energon_arrow.index.side_index import open_verified_parquet

    rel = f"{SIDE_INDEX_DIR}/{name}.parquet"
    try:
        pf = open_verified_parquet(storage, rel)  # None: no manifest lists it (read in place, unchecked)
        if pf is None and storage.is_local:
            pf = pq.ParquetFile(storage.local_path(rel), memory_map=True)
        elif pf is None:
            pf = pq.ParquetFile(storage.retrying_fs.open(storage.path_of(rel), "rb"))
        present = set(pf.schema_arrow.names)  # optional columns (schema.OPTIONAL_COLUMNS) may be absent
        yield from pf.iter_batches(batch_size=_BATCH_ROWS, columns=[c for c in columns if c in present])
    except (OSError, pa.ArrowException) as exc:
        if isinstance(exc, StorageError):
            raise
        raise LoaderError(f"{storage.url_of(rel)}: unreadable side index ({exc})") from None


def _global_rows(
    starts: np.ndarray, shard_id: np.ndarray, sample_index: np.ndarray, where: str
) -> np.ndarray:
    if len(shard_id) and (shard_id.min() < 0 or shard_id.max() >= len(starts) - 1):
        raise LoaderError(f"{where}: shard_id out of range 0..{len(starts) - 2}")
    rows = starts[shard_id] + sample_index
    bad = (sample_index < 0) | (rows >= starts[shard_id + 1])
    if bad.any():
        i = int(np.argmax(bad))
        raise LoaderError(
            f"{where}: sample_index {int(sample_index[i])} of shard {int(shard_id[i])} is beyond the shard's "
            f"sample_count {int(starts[shard_id[i] + 1] - starts[shard_id[i]])}"
        )
    return rows


def build_row_index(
    storage: Storage, counts: np.ndarray, tables: dict, folder: str, identity: list[str]
) -> None:
    """Write the row index into `folder` atomically (a private temporary folder renamed into place). The caller
    holds `build_lock(folder)`: any temporary folder of this entry left in `folder`'s parent is abandoned (its
    builder was killed; a process that died moments ago may not be reaped yet) and is removed first."""
    from energon_arrow.adapters.publish import private_mkdtemp

    parent = os.path.dirname(folder)
    os.makedirs(parent, exist_ok=True)
    prefix = f".{os.path.basename(folder)}.rows-"
    for name in os.listdir(parent):
        if name.startswith(prefix):
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
    tmp = private_mkdtemp(prefix, parent)
    try:
        _write(storage, np.asarray(counts, np.int64), tables, tmp, identity)
        old = folder + ".old"
        if os.path.isdir(folder):  # stale: move aside, then swap in
            shutil.rmtree(old, ignore_errors=True)
            os.rename(folder, old)
        try:
            os.rename(tmp, folder)
        except OSError:
            if not os.path.isdir(folder):  # lost no race: a real failure
                raise
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _written(*arrays: np.ndarray) -> None:
    """Drop the pages of memory-mapped output from this process: the build's resident memory stays at one record
    batch, not the whole index. The mappings are shared, so the dirty pages stay in the page cache with their
    contents (MADV_DONTNEED on a shared file mapping does not discard writes): no `flush` (msync), a
    synchronous write-back to disk that readers on this machine do not need (~65 ms of a 64k-sample prepare;
    the side index and index.sqlite are not synced either)."""
    for arr in arrays:
        m = getattr(arr, "_mmap", None)
        if m is not None:
            m.madvise(mmap.MADV_DONTNEED)


def _write(storage: Storage, counts: np.ndarray, tables: dict, tmp: str, identity: list[str]) -> None:
    from numpy.lib.format import open_memmap

    starts = np.r_[0, np.cumsum(counts)].astype(np.int64)
    n = int(starts[-1])
    np.save(os.path.join(tmp, "shard_starts.npy"), starts)
    rows = open_memmap(os.path.join(tmp, "rows.npy"), "w+", np.int64, (n, 2))
    key_offsets = open_memmap(os.path.join(tmp, "key_offsets.npy"), "w+", np.int64, (n + 1,))
    key_offsets[0] = 0
    samples_where = storage.url_of(f"{SIDE_INDEX_DIR}/samples")
    done = 0
    with open(os.path.join(tmp, "key_data.bin"), "wb") as key_data:
        cols = ["shard_id", "sample_index", "sample_key", "byte_offset", "byte_size"]
        for batch in _batches(storage, tables, "samples", cols):
            m = batch.num_rows
            g = _global_rows(
                starts,
                ints_to_numpy(batch["shard_id"]).astype(np.int64),
                ints_to_numpy(batch["sample_index"]),
                samples_where,
            )
            if not np.array_equal(g, np.arange(done, done + m)):
                i = int(np.argmax(g != np.arange(done, done + m)))
                raise LoaderError(
                    f"{samples_where}: row {done + i} is sample {int(g[i] - starts[batch['shard_id'][i].as_py()])} "
                    f"of shard {batch['shard_id'][i].as_py()}: samples are not dense and in (shard_id, "
                    "sample_index) order; rebuild the side index with `energon-arrow prepare`"
                )
            rows[done : done + m, 0] = ints_to_numpy(batch["byte_offset"])
            rows[done : done + m, 1] = ints_to_numpy(batch["byte_size"])
            keys = pa.concat_arrays([batch["sample_key"].cast(pa.large_string())])
            off = np.frombuffer(keys.buffers()[1], np.int64, m + 1)
            key_offsets[done + 1 : done + m + 1] = key_offsets[done] + off[1:] - off[0]
            key_data.write(memoryview(keys.buffers()[2])[off[0] : off[-1]] if m else b"")
            done += m
            _written(rows, key_offsets)
    if done != n:
        raise LoaderError(f"{samples_where}: {done} samples, but the shards' sample_count adds up to {n}")
    names, checksums = _write_parts(storage, tables, tmp, starts, rows)
    manifest = {
        "version": ROW_INDEX_VERSION,
        "rows": n,
        "shards": len(counts),
        "parts": names,
        "checksums": checksums,
        "source": identity,
        "files": {name: os.path.getsize(os.path.join(tmp, name)) for name in sorted(os.listdir(tmp))},
    }
    with open(os.path.join(tmp, "manifest.json"), "w") as f:
        json.dump(manifest, f)


def _write_parts(
    storage: Storage, tables: dict, tmp: str, starts: np.ndarray, rows: np.ndarray
) -> tuple[list[str], bool]:
    """Scatter the parts table into one (relative offset, size) file per part name, and its CRC32C into one
    crc file per part name; returns the names and whether every part had a CRC (else no crc file is kept)."""
    from numpy.lib.format import open_memmap

    n = len(rows)
    files: dict[str, np.ndarray] = {}
    crc_files: dict[str, np.ndarray] = {}
    checksums = True
    where = storage.url_of(f"{SIDE_INDEX_DIR}/parts")
    cols = ["shard_id", "sample_index", "part_name", "content_offset", "content_size", "content_crc32c"]
    for batch in _batches(storage, tables, "parts", cols):
        crc_col = batch["content_crc32c"] if "content_crc32c" in batch.schema.names else None
        if checksums and (crc_col is None or crc_col.null_count):
            checksums = False  # written before checksums or converted from index.sqlite: none at all
            for name in list(crc_files):
                crc_files.pop(name)
            for i in range(len(files)):
                os.remove(os.path.join(tmp, f"crc-{i}.npy"))
        crc = ints_to_numpy(crc_col) if checksums else None
        g = _global_rows(
            starts,
            ints_to_numpy(batch["shard_id"]).astype(np.int64),
            ints_to_numpy(batch["sample_index"]),
            where,
        )
        names = batch["part_name"]
        if not pa.types.is_dictionary(names.type):
            names = names.dictionary_encode()
        codes = ints_to_numpy(names.indices)
        if not len(g):
            continue
        # the batch's rows form one window (parts are in sample order): scatter in memory, write it back whole
        lo, hi = int(g.min()), int(g.max()) + 1
        g = g - lo
        rel = ints_to_numpy(batch["content_offset"]) - np.asarray(rows[lo:hi, 0])[g]
        size = ints_to_numpy(batch["content_size"])
        for code, name in enumerate(names.dictionary.to_pylist()):
            m = codes == code
            if not m.any():
                continue
            if name not in files:
                arr = open_memmap(os.path.join(tmp, f"part-{len(files)}.npy"), "w+", np.int64, (n, 2))
                arr[:, 0] = -1
                _written(arr)
                if checksums:
                    crc_files[name] = open_memmap(
                        os.path.join(tmp, f"crc-{len(files)}.npy"), "w+", np.uint32, (n,)
                    )
                files[name] = arr
            window = np.array(files[name][lo:hi])  # a sample's parts may start in the previous batch
            window[g[m], 0] = rel[m]
            window[g[m], 1] = size[m]
            files[name][lo:hi] = window
            if crc is not None:
                crc_files[name][lo + g[m]] = crc[m]
        _written(rows, *files.values(), *crc_files.values())
    return list(files), checksums
