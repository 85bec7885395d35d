"""Parquet side indexes under `.nv-meta/arrow/` (schemas in `energon_arrow.index.schema`, docs/format.md).

- `SideIndexWriter(folder)`: streaming writers for `shards.parquet`, `samples.parquet`, `parts.parquet`;
  `.add_shard(shard_id, path, size, mtime, etag, index)` appends one shard (rows stay in shard_id order when shards are
  added in that order), `.close() -> {relative name: local path}` for `Storage.publish_folder`.
- `read_side_index(storage) -> SideIndex | None`: the previous side index of a dataset (None when absent), with
  `.shard_rows(path)` giving back an indexed shard's rows (for incremental prepare).
"""

from __future__ import annotations

import contextlib
import io
import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from energon_arrow.adapters import NotFound
from energon_arrow.index.schema import (
    PARTS_SCHEMA,
    SAMPLES_SCHEMA,
    SHARDS_SCHEMA,
    SIDE_INDEX_DIR,
    with_optional_columns,
)
from energon_arrow.tar.arrow import from_bytes_list, from_numpy, ints_to_numpy
from energon_arrow.tar.samples import ShardIndex

_ROW_GROUP_ROWS = 1 << 20
_COMPACT = 256
SIDE_INDEX_NAMES = {name: f"arrow/{name}.parquet" for name in ("shards", "samples", "parts")}


def _table(schema: pa.Schema, columns: list) -> pa.Table:
    return pa.Table.from_arrays(columns, schema=schema)


ENERGON_INDEX_KEY = b"energon_arrow.energon_index"  # shards.parquet metadata: b"false" = no index.sqlite


def has_energon_index(shards_schema: pa.Schema) -> bool:
    """False for a dataset prepared with `--no-energon-index` (no index.sqlite)."""
    return (shards_schema.metadata or {}).get(ENERGON_INDEX_KEY) != b"false"


class SideIndexWriter:
    def __init__(self, folder: str, energon_index: bool = True):
        self.folder = folder
        self.energon_index = energon_index
        os.makedirs(os.path.join(folder, "arrow"), exist_ok=True)
        self.paths = {name: os.path.join(folder, rel) for name, rel in SIDE_INDEX_NAMES.items()}
        opts = {"compression": "zstd", "write_statistics": True}
        self._samples = pq.ParquetWriter(self.paths["samples"], SAMPLES_SCHEMA, **opts)
        self._parts = pq.ParquetWriter(self.paths["parts"], PARTS_SCHEMA, **opts)
        self._shards: list[tuple] = []
        self._pending: dict[str, list[pa.Table]] = {"samples": [], "parts": []}
        self._pending_rows = 0

    def _flush(self, force: bool = False) -> None:
        """Row groups of about 1M parts: one per shard would make small, slow-to-write groups."""
        if not force and self._pending_rows < _ROW_GROUP_ROWS:
            return
        for name, writer in (("samples", self._samples), ("parts", self._parts)):
            if self._pending[name]:
                writer.write_table(pa.concat_tables(self._pending[name]), row_group_size=1 << 22)
                self._pending[name] = []
        self._pending_rows = 0

    def add_shard(self, shard_id: int, path: str, size: int, mtime, etag, index: ShardIndex) -> None:
        n, m = index.sample_count, index.part_count
        ids_n = from_numpy(np.full(n, shard_id, dtype=np.int32), np.int32)
        self._pending["samples"].append(
            _table(
                SAMPLES_SCHEMA,
                [
                    ids_n,
                    from_numpy(np.arange(n, dtype=np.int64)),
                    index.sample_keys.cast(pa.string()),
                    from_numpy(index.sample_offsets),
                    from_numpy(index.sample_sizes),
                ],
            )
        )
        self._pending["parts"].append(
            _table(
                PARTS_SCHEMA,
                [
                    from_numpy(np.full(m, shard_id, dtype=np.int32), np.int32),
                    from_numpy(index.part_sample_index),
                    pc.dictionary_encode(index.part_names.cast(pa.string())).cast(
                        pa.dictionary(pa.int32(), pa.string())
                    ),
                    from_numpy(index.part_offsets),
                    from_numpy(index.part_sizes),
                ],
            )
        )
        self._shards.append((shard_id, path, n, size, mtime, etag, index.data_end, index.fingerprint))
        self._pending_rows += m
        self._compact()
        self._flush()

    def _compact(self) -> None:
        """Tiny shards: every 256 pending per-shard tables become one (their columns copied once), so that 1M
        parts from 30-part shards are ~130 tables, not 30k (each holds buffers and objects of its own)."""
        for tables in self._pending.values():
            if len(tables) >= _COMPACT + 1 and all(
                t.num_rows < _ROW_GROUP_ROWS // _COMPACT for t in tables[-_COMPACT:]
            ):
                tables[-_COMPACT:] = [pa.concat_tables(tables[-_COMPACT:]).combine_chunks()]

    def close(self) -> dict[str, str]:
        self._flush(force=True)
        self._samples.close()
        self._parts.close()
        ids, paths, counts, sizes, mtimes, etags, ends, fingerprints = (
            (list(c) for c in zip(*self._shards)) if self._shards else ([[] for _ in range(8)])
        )
        mtime_valid = np.array([m is not None for m in mtimes], dtype=bool)
        table = pa.Table.from_arrays(
            [
                from_numpy(np.array(ids, dtype=np.int32), np.int32),
                from_bytes_list(paths, pa.string()),
                from_numpy(np.array(counts, dtype=np.int64)),
                from_numpy(np.array(sizes, dtype=np.int64)),
                from_numpy(np.array([m or 0.0 for m in mtimes], dtype=np.float64), np.float64, mtime_valid),
                from_bytes_list(etags, pa.string()),
                from_numpy(np.array(ends, dtype=np.int64)),
                from_bytes_list(fingerprints, pa.string()),
            ],
            schema=SHARDS_SCHEMA,
        )
        if not self.energon_index:
            table = table.replace_schema_metadata({ENERGON_INDEX_KEY: b"false"})
        pq.write_table(table, self.paths["shards"], compression="zstd")
        return {rel: self.paths[name] for name, rel in SIDE_INDEX_NAMES.items()}

    def abort(self) -> None:
        for w in (self._samples, self._parts):
            with contextlib.suppress(Exception):  # best effort while unwinding another error
                w.close()


def _read(path) -> pa.Table:
    return pq.ParquetFile(path).read()  # pq.read_table would import pandas


@dataclass
class SideIndex:
    shards: pa.Table
    samples: pa.Table
    parts: pa.Table

    def __post_init__(self):
        self._by_path = {p: i for i, p in enumerate(self.shards.column("path").to_pylist())}
        self._sample_bounds = _bounds(self.samples.column("shard_id"), len(self.shards))
        self._part_bounds = _bounds(self.parts.column("shard_id"), len(self.shards))

    def identity(self, path: str) -> tuple[int, float | None, str | None] | None:
        i = self._by_path.get(path)
        if i is None:
            return None
        row = self.shards.slice(i, 1).to_pylist()[0]
        return row["size"], row["mtime"], row["etag"]

    def content(self, path: str) -> tuple[int, str | None]:
        """(data_end, fingerprint) recorded for an indexed shard."""
        i = self._by_path[path]
        return self.shards.column("data_end")[i].as_py(), self.shards.column("fingerprint")[i].as_py()

    def shard_rows(self, path: str) -> ShardIndex:
        i = self._by_path[path]
        sid = self.shards.column("shard_id")[i].as_py()
        s0, s1 = self._sample_bounds[sid]
        p0, p1 = self._part_bounds[sid]
        samples = self.samples.slice(s0, s1 - s0)
        parts = self.parts.slice(p0, p1 - p0)
        return ShardIndex(
            sample_keys=samples.column("sample_key").combine_chunks(),
            sample_offsets=ints_to_numpy(samples.column("byte_offset")),
            sample_sizes=ints_to_numpy(samples.column("byte_size")),
            part_sample_index=ints_to_numpy(parts.column("sample_index")),
            part_names=parts.column("part_name").combine_chunks().cast(pa.string()),
            part_offsets=ints_to_numpy(parts.column("content_offset")),
            part_sizes=ints_to_numpy(parts.column("content_size")),
            data_end=self.shards.column("data_end")[i].as_py(),
            fingerprint=self.shards.column("fingerprint")[i].as_py(),
        )


def _bounds(shard_ids: pa.ChunkedArray, n_shards: int) -> dict[int, tuple[int, int]]:
    ids = ints_to_numpy(shard_ids)
    if len(ids) == 0:
        return {}
    change = np.nonzero(np.diff(ids))[0] + 1
    starts = np.concatenate([[0], change])
    ends = np.concatenate([change, [len(ids)]])
    return {int(ids[s]): (int(s), int(e)) for s, e in zip(starts, ends)}


def read_side_index(storage) -> SideIndex | None:
    tables = {}
    for name, rel in SIDE_INDEX_NAMES.items():
        try:
            data = storage.read_bytes(f"{SIDE_INDEX_DIR.split('/', 1)[0]}/{rel}")
        except NotFound:
            return None
        tables[name] = with_optional_columns(_read(io.BytesIO(data)), name)
    for name, schema in (("shards", SHARDS_SCHEMA), ("samples", SAMPLES_SCHEMA), ("parts", PARTS_SCHEMA)):
        if tables[name].schema.names != schema.names:
            return None
    return SideIndex(tables["shards"], tables["samples"], tables["parts"])
