"""A split of a prepared dataset as the loader sees it: the effective sample table plus the dataset config.

The table columns (`shard_id`, `sample_index`, `byte_offset`, `byte_size`) are in energon iteration order and index
like numpy arrays; keys like an Arrow string array. A split opened with `open_split` reads them lazily from the
dataset's memory-mapped row index through a RowMap (loader/split_rows.py: `MappedColumn`, `MappedKeys`), so opening
costs O(shards); other sources (JSONL, joined metadatasets) hold numpy arrays moved into memory maps (`map_index`). `parts` maps each part name to two int64 arrays over the rows: the payload's
offset relative to the sample's byte_offset (-1 when the sample lacks that part) and its size, so workers slice
payloads out of the fetched sample bytes without parsing tar headers.
Arrays built before the DataLoader forks its workers are shared copy-on-write, not copied into each worker.
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import shutil
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from energon_arrow.adapters import Storage, open_storage
from energon_arrow.loader.errors import LoaderError
from energon_arrow.loader.row_index import RowIndex, open_row_index
from energon_arrow.loader.shard_check import ShardCheck, check_listed
from energon_arrow.loader.split_rows import (
    MappedColumn,
    MappedKeys,
    RowMap,
    excluded_positions,
    positions_of,
    rows_before,
    split_row_map,
)
from energon_arrow.meta import DatasetYaml

_SHARD_PATH_COLUMNS = ("shard_path", "shard", "path")


@dataclass
class SplitSource:
    storage: Storage
    shard_paths: list[str]
    shard_id: np.ndarray
    sample_index: np.ndarray
    byte_offset: np.ndarray
    byte_size: np.ndarray
    keys: pa.Array | None = None
    config: DatasetYaml = field(default_factory=DatasetYaml)
    subflavors: dict | None = None
    name: str = ""  # for messages: dataset URL + split
    aux: dict = field(default_factory=dict)  # name -> file store handed to cookers (metadataset `aux:`)
    parts: dict[str, tuple[np.ndarray, np.ndarray]] | None = None
    _key_maps: list = field(default_factory=list)  # memory maps behind `keys` (see map_index)
    builder: Any = None  # the SampleBuilder class for this source (None: SampleBuilder; JSONL has its own)
    rowmap: RowMap | None = None  # the split's runs of row-index rows when the columns are MappedColumns
    shard_check: ShardCheck | None = None  # local shards: identity checked at first read (shard_check.py)
    #: the split position of row 0 (a metadataset subset starts inside the split; `subset` moves it): a sample's
    #: `SourceInfo.index` is its position in the split, as energon's. With `excluded` samples: energon's index of
    #: position 0 of this source's index space (see `excluded`)
    row_offset: int = 0
    #: part name -> CRC32C of each dataset row's payload (the row index's crc files, read through `rowmap`); None:
    #: the dataset records no checksums (loader/verify_crc.py)
    part_crcs: dict[str, np.ndarray] | None = None
    #: the split's shards as its split.yaml lists them, whole-shard excludes left out: (path, sample count in
    #: .info.json); None: not opened from a split (energon's `factory.shards`, energon/factory_config.py)
    split_shards: list[tuple[str, int]] | None = None
    #: the split.yaml's `exclude` entries naming a sample (or a shard by its path), as energon's
    #: `factory.sample_excludes` lists them (the entries containing "/", in its set order)
    sample_excludes: list[str] = field(default_factory=list)
    #: the metadataset `subset:` this source was cut with, as energon's factories report it (`{"range": ...,
    #: "absolute_range": ...}`, metadataset/subset.py `energon_config`); None: no subset
    subset_config: dict | None = None
    #: the split.yaml's excluded samples (`<shard>/<key>`) that lie in this source, as energon 7.4.1 counts them:
    #: sorted positions in energon's index space of the source (its rows in order with those samples put back;
    #: position p is energon's sample index row_offset + p). energon's worker slices, shuffling and len() count
    #: them, its sample loader skips them as it reads them (energon/train_order.py, worker_slices.py); None or
    #: empty: none (then positions are rows)
    excluded: np.ndarray | None = None
    #: whether energon cuts this source's worker slices into sequences at its shard boundaries: a dataset's
    #: factory does (energon's `shard_workers`); a join's index is sliced as one run of rows (`slice_workers`)
    cut_at_shards: bool = True

    def __len__(self) -> int:
        return len(self.shard_id)

    def has_excluded(self) -> bool:
        return self.excluded is not None and len(self.excluded) > 0

    def energon_len(self) -> int:
        """The positions of this source in energon's index space: its rows plus its excluded samples."""
        return len(self) + (len(self.excluded) if self.excluded is not None else 0)

    def energon_shard_bounds(self) -> np.ndarray:
        """The shard boundaries inside this source in energon's index space (where energon cuts its worker slices
        into sequences): the split's shards by their .info.json sample counts (sources with `excluded` samples,
        which are opened from a split); otherwise the starts of the runs of rows of one shard. None inside a join."""
        if not self.cut_at_shards:
            return np.zeros(0, np.int64)
        if not self.has_excluded() or not self.split_shards:
            return self.shard_runs()[0]
        counts = [count for _name, count in self.split_shards]
        bounds = np.cumsum([0] + counts, dtype=np.int64) - self.row_offset
        return bounds[(bounds > 0) & (bounds < self.energon_len())]

    def new_builder(self, decoder, trust_remote_code: bool = False, subflavors: dict | None = None):
        """The sample builder of this source (its own class for JSONL and joined sources); `subflavors`: those
        to give the samples (default the source's)."""
        from energon_arrow.loader.builder import SampleBuilder

        builder = (self.builder or SampleBuilder)(
            self.storage,
            self.config,
            decoder,
            self.subflavors if subflavors is None else subflavors,
            trust_remote_code,
        )
        builder.index_offset = self.row_offset
        if self.has_excluded():  # SourceInfo.index is energon's index, which counts the excluded samples
            builder.index_gaps = self.excluded
        return builder

    @classmethod
    def from_table(
        cls,
        storage: Storage,
        table: Any,
        config: DatasetYaml | None = None,
        subflavors: dict | None = None,
        name: str = "",
    ) -> SplitSource:
        """Build from an Arrow table / polars frame with shard_id, a shard path column, sample_index,
        sample_key, byte_offset, byte_size (the query layer's effective split table)."""
        if not isinstance(table, pa.Table):
            table = table.to_arrow() if hasattr(table, "to_arrow") else pa.table(table)
        cols = set(table.column_names)
        path_col = next((c for c in _SHARD_PATH_COLUMNS if c in cols), None)
        missing = [c for c in ("shard_id", "sample_index", "byte_offset", "byte_size") if c not in cols]
        if missing or path_col is None:
            raise LoaderError(
                f"{name}: sample table lacks columns {missing or ['shard_path']} (has {sorted(cols)})"
            )
        shard_id = table["shard_id"].to_numpy().astype(np.int32, copy=False)
        paths: dict[int, str] = {}
        if len(table):
            pairs = (
                pa.table({"i": table["shard_id"], "p": table[path_col]}).group_by(["i", "p"]).aggregate([])
            )
            for i, p in zip(pairs["i"].to_pylist(), pairs["p"].to_pylist()):
                if paths.setdefault(i, p) != p:
                    raise LoaderError(f"{name}: shard id {i} maps to two paths {paths[i]!r} and {p!r}")
        # Dense renumbering: workers index shard_paths by position.
        ids = sorted(paths)
        remap = np.zeros(max(ids) + 1 if ids else 1, np.int32)
        remap[ids] = np.arange(len(ids), dtype=np.int32)
        return cls(
            storage=storage,
            shard_paths=[paths[i] for i in ids],
            shard_id=remap[shard_id] if len(shard_id) else shard_id,
            sample_index=table["sample_index"].to_numpy().astype(np.int64, copy=False),
            byte_offset=table["byte_offset"].to_numpy().astype(np.int64, copy=False),
            byte_size=table["byte_size"].to_numpy().astype(np.int64, copy=False),
            keys=table["sample_key"].combine_chunks() if "sample_key" in cols else None,
            config=config or DatasetYaml(),
            subflavors=subflavors,
            name=name,
        )

    def release_pages(self) -> None:
        """Drop this process's mappings of index pages it touched (they stay in the page cache), so a long
        running worker's resident set stays bounded; the next access maps them again."""
        maps = {
            id(m): m for a in [self.shard_id, *self._key_maps] if (m := getattr(a, "_mmap", None)) is not None
        }
        for m in maps.values():
            m.madvise(mmap.MADV_DONTNEED)

    def shard_runs(self, lo: int = 0, hi: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(start relative to lo, length) of each maximal run of consecutive rows of one shard in rows [lo, hi):
        O(runs) for a mapped split, one vectorised pass over the slice otherwise."""
        hi = len(self) if hi is None else hi
        if self.rowmap is not None:
            return self.rowmap.slice(lo, hi).shard_runs()
        sid = np.asarray(self.shard_id[lo:hi])
        if not len(sid):
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        starts = np.flatnonzero(np.r_[True, sid[1:] != sid[:-1]])
        return starts, np.diff(np.r_[starts, len(sid)])

    def energon_subset(self, start: int, end: int) -> SplitSource:
        """Positions [start, end) of energon's index space (`excluded`; rows when there are none): the rows in it,
        with its excluded samples (energon cuts a metadataset `subset` out of its index space)."""
        if not self.has_excluded():
            return self.subset(start, end)
        gaps = self.excluded
        out = self.subset(int(rows_before(gaps, start)), int(rows_before(gaps, end)))
        out.excluded = gaps[(gaps >= start) & (gaps < end)] - start
        out.row_offset = self.row_offset + start
        return out

    def subset(self, start: int, end: int) -> SplitSource:
        """Rows [start, end) of the table (metadataset `subset` ranges); with `excluded` samples, those between
        the two rows stay in the subset's index space."""
        if self.has_excluded():
            lo = int(positions_of(self.excluded, start))
            hi = int(positions_of(self.excluded, end - 1)) + 1 if end > start else lo
            out = self._rows(start, end)
            out.excluded = self.excluded[(self.excluded >= lo) & (self.excluded < hi)] - lo
            out.row_offset = self.row_offset + lo
            return out
        return self._rows(start, end)

    def _rows(self, start: int, end: int) -> SplitSource:
        if self.rowmap is not None:
            rowmap = self.rowmap.slice(start, end)
            return dataclasses.replace(
                self,
                shard_id=self.shard_id.with_rowmap(rowmap),
                sample_index=self.sample_index.with_rowmap(rowmap),
                byte_offset=self.byte_offset.with_rowmap(rowmap),
                byte_size=self.byte_size.with_rowmap(rowmap),
                keys=MappedKeys(rowmap, self.keys.all),
                name=f"{self.name}[{start}:{end}]",
                row_offset=self.row_offset + start,
                parts={k: (o.with_rowmap(rowmap), z.with_rowmap(rowmap)) for k, (o, z) in self.parts.items()},
                rowmap=rowmap,
            )
        sl = slice(start, end)
        return dataclasses.replace(
            self,
            shard_id=self.shard_id[sl],
            sample_index=self.sample_index[sl],
            byte_offset=self.byte_offset[sl],
            byte_size=self.byte_size[sl],
            keys=None if self.keys is None else self.keys[start:end],
            name=f"{self.name}[{start}:{end}]",
            row_offset=self.row_offset + start,
            parts=None if self.parts is None else {k: (o[sl], z[sl]) for k, (o, z) in self.parts.items()},
        )  # the rest is shared, the key maps too (release_pages)


def open_split(
    path: str | Storage,
    split: str = "train",
    storage_options: dict | None = None,
    subflavors: dict | None = None,
    dataset_yaml: str = "dataset.yaml",
    split_config: str = "split.yaml",
    verify: bool = True,
    publish: bool = True,
) -> SplitSource:
    """The effective sample table of `split` (exclusions applied, shards checked against the index) and the
    dataset.yaml of a prepared dataset, local or on S3. A `split_config` / `split_part` named in the dataset.yaml
    wins over the arguments (energon's rule); its other energon factory keys: loader/dataset_yaml_args.py.

    Reads O(shards + excluded samples): the shards table, split.yaml and the memory-mapped row index (built once
    per dataset, loader/row_index.py); the split is a list of row runs whose columns are read per batch.
    `publish`: a dataset prepared by energon (no Parquet side index yet) gets the side index converted from its
    index.sqlite published next to it where the store is writable, once, so that every later open is O(shards);
    False (read-only commands such as lint) keeps the conversion in memory and writes nothing to the dataset."""
    from energon_arrow.loader.dataset_yaml_args import yaml_split_args
    from energon_arrow.meta import read_dataset_yaml
    from energon_arrow.meta.info import read_info
    from energon_arrow.meta.split import read_split
    from energon_arrow.query.errors import QueryError
    from energon_arrow.query.sideindex import check_shard_paths, load_side_index, verify_shards
    from energon_arrow.query.splits import split_tables

    storage = path if isinstance(path, Storage) else open_storage(path, storage_options)
    info = read_info(storage)
    side = load_side_index(storage, publish=publish)
    shards = side.tables["shards"]
    paths = list(info.shard_counts)
    check = None
    if verify and storage.is_local:  # O(folders) now, each shard's identity when a process first opens it
        check_shard_paths(storage, shards, paths)
        check_listed(storage, paths)
        check = ShardCheck(storage, shards)
    elif verify:  # object stores: one listing has every shard's size and ETag
        verify_shards(storage, shards, paths)
    dataset = read_dataset_yaml(storage, dataset_yaml)
    named = yaml_split_args(dataset)  # the dataset.yaml's split_config / split_part win, as in energon
    split_config, split = named.get("split_config", split_config), named.get("split_part", split)
    config = read_split(storage, split_config).expanded()  # once: split_tables looks at it three times
    if split not in config.split_parts:
        raise QueryError(
            f"{storage.url_of('.nv-meta/' + split_config)}: no split {split!r} "
            f"(splits: {', '.join(config.split_parts) or 'none'})"
        )
    splits, excludes = split_tables(config, paths, storage.url_of(f".nv-meta/{split_config}"))
    mine = splits.filter(pc.and_(pc.equal(splits["split"], split), pc.invert(splits["excluded"])))
    samples = excludes.filter(pc.equal(excludes["kind"], "sample"))
    excluded: dict[int, list[str]] = {}
    for sid, key in zip(samples["shard_id"].to_pylist(), samples["sample_key"].to_pylist()):
        excluded.setdefault(sid, []).append(key)
    published = side.source in ("parquet", "index.sqlite (converted, published)")
    tables = {k: v for k, v in side.tables.items() if k != "shards"}
    index = open_row_index(storage, shards, tables, published)
    gaps: list = []
    rowmap = split_row_map(index, mine["shard_id"].to_numpy().astype(np.int64), excluded, gaps)
    del side
    _trim_heap()
    src = mapped_source(
        storage, paths, index, rowmap, dataset, subflavors,
        f"{storage.url} split {split!r}",
    )  # fmt: skip
    src.shard_check = check
    src.split_shards = [(p, info.shard_counts[p]) for p in mine["path"].to_pylist()]
    src.sample_excludes = config.energon_sample_excludes()
    src.excluded = excluded_positions(gaps)
    return src


def mapped_source(
    storage: Storage,
    shard_paths: list[str],
    index: RowIndex,
    rowmap: RowMap,
    config: DatasetYaml,
    subflavors: dict | None,
    name: str,
) -> SplitSource:
    """A SplitSource whose columns read the row index through `rowmap` (shard ids index `shard_paths`)."""
    starts = index.shard_starts
    return SplitSource(
        storage=storage,
        shard_paths=shard_paths,
        shard_id=MappedColumn(rowmap, None, 0, "shard"),
        sample_index=MappedColumn(rowmap, None, 0, "sample_index", starts),
        byte_offset=MappedColumn(rowmap, index.rows, 0),
        byte_size=MappedColumn(rowmap, index.rows, 1),
        keys=MappedKeys(rowmap, index.keys()),
        config=config,
        subflavors=subflavors,
        name=name,
        parts={k: (MappedColumn(rowmap, a, 0), MappedColumn(rowmap, a, 1)) for k, a in index.parts.items()},
        _key_maps=index.maps(),
        rowmap=rowmap,
        part_crcs=index.crcs,
    )


def map_index(src: SplitSource) -> SplitSource:
    """Move the index arrays into memory-mapped files (unlinked at once; the mappings stay valid), so the
    DataLoader workers forked later map the same page-cache pages instead of inheriting private copies, and a
    worker's resident memory does not grow with the dataset."""
    from energon_arrow.adapters.publish import private_mkdtemp

    folder = private_mkdtemp("energon-arrow-index-")
    try:

        def mapped(name: str, arr: np.ndarray) -> np.ndarray:
            path = os.path.join(folder, f"{name}.npy")
            np.save(path, np.ascontiguousarray(arr))
            return np.load(path, mmap_mode="r")

        # one row-major table: a batch's rows touch one region of one mapping, not one per column
        parts = list((src.parts or {}).items())
        columns = [src.shard_id, src.sample_index, src.byte_offset, src.byte_size]
        columns += [c for _, pair in parts for c in pair]
        table = mapped("rows", np.stack([np.asarray(c, np.int64) for c in columns], axis=1))
        src.shard_id, src.sample_index, src.byte_offset, src.byte_size = (table[:, i] for i in range(4))
        src.part_crcs = None  # they are read through a row map, which the copied columns no longer have
        if src.parts is not None:
            src.parts = {k: (table[:, 4 + 2 * i], table[:, 5 + 2 * i]) for i, (k, _) in enumerate(parts)}
        if src.keys is not None:
            keys = src.keys.cast(pa.large_string()) if pa.types.is_string(src.keys.type) else src.keys
            keys = pa.concat_arrays([keys])  # offset 0, no nulls
            _, offsets, data = keys.buffers()
            off = mapped("key_offsets", np.frombuffer(offsets, np.int64, len(keys) + 1))
            chars = mapped(
                "key_data", np.frombuffer(data, np.uint8, int(off[-1])) if data else np.zeros(0, np.uint8)
            )
            src.keys = pa.LargeStringArray.from_buffers(len(keys), pa.py_buffer(off), pa.py_buffer(chars))
            src._key_maps = [off, chars]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    pa.default_memory_pool().release_unused()
    _trim_heap()
    return src


def _trim_heap() -> None:
    """Return the freed parts of the C heap (left by building the index) to the OS before workers fork, so the
    workers' allocations do not copy-on-write stale parent heap pages."""
    import ctypes

    libc = ctypes.CDLL(None)  # the process's own symbols (libc's among them): no `ldconfig -p` lookup
    if hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)
