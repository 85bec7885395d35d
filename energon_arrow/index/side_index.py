"""Parquet side indexes under `.nv-meta/arrow/` (schemas in `energon_arrow.index.schema`, docs/format.md).

- `SideIndexWriter(folder)`: streaming writers for `shards.parquet`, `samples.parquet`, `parts.parquet`;
  `.add_shard(shard_id, path, identity, index)` appends one shard (rows stay in shard_id order when shards are
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
from energon_arrow.index.schema import PARTS_SCHEMA, SAMPLES_SCHEMA, SHARDS_SCHEMA, SIDE_INDEX_DIR
from energon_arrow.tar.samples import ShardIndex

_ROW_GROUP_ROWS = 1 << 20
SIDE_INDEX_NAMES = {name: f"arrow/{name}.parquet" for name in ("shards", "samples", "parts")}


def _table(schema: pa.Schema, columns: list) -> pa.Table:
    return pa.Table.from_arrays(columns, schema=schema)


class SideIndexWriter:
    def __init__(self, folder: str):
        self.folder = folder
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
        ids_n = pa.array(np.full(n, shard_id, dtype=np.int32))
        self._pending["samples"].append(
            _table(
                SAMPLES_SCHEMA,
                [
                    ids_n,
                    pa.array(np.arange(n, dtype=np.int64)),
                    index.sample_keys.cast(pa.string()),
                    pa.array(index.sample_offsets, pa.int64()),
                    pa.array(index.sample_sizes, pa.int64()),
                ],
            )
        )
        self._pending["parts"].append(
            _table(
                PARTS_SCHEMA,
                [
                    pa.array(np.full(m, shard_id, dtype=np.int32)),
                    pa.array(index.part_sample_index, pa.int64()),
                    pc.dictionary_encode(index.part_names.cast(pa.string())).cast(
                        pa.dictionary(pa.int32(), pa.string())
                    ),
                    pa.array(index.part_offsets, pa.int64()),
                    pa.array(index.part_sizes, pa.int64()),
                ],
            )
        )
        self._shards.append((shard_id, path, n, size, mtime, etag, index.data_end))
        self._pending_rows += m
        self._flush()

    def close(self) -> dict[str, str]:
        self._flush(force=True)
        self._samples.close()
        self._parts.close()
        cols = list(zip(*self._shards)) if self._shards else [[] for _ in SHARDS_SCHEMA]
        table = pa.Table.from_arrays(
            [pa.array(list(c), f.type) for c, f in zip(cols, SHARDS_SCHEMA)], schema=SHARDS_SCHEMA
        )
        pq.write_table(table, self.paths["shards"], compression="zstd")
        return {rel: self.paths[name] for name, rel in SIDE_INDEX_NAMES.items()}

    def abort(self) -> None:
        for w in (self._samples, self._parts):
            with contextlib.suppress(Exception):  # best effort while unwinding another error
                w.close()


def drop_side_shards(paths: dict[str, str], drop: set[str]) -> None:
    """Rewrite closed side-index files without the shards whose path is in `drop`, renumbering shard ids."""
    files = {name: paths[rel] for name, rel in SIDE_INDEX_NAMES.items()}
    shards = pq.read_table(files["shards"])
    keep = np.array([p not in drop for p in shards.column("path").to_pylist()])
    old_ids = shards.column("shard_id").to_numpy()
    remap = np.full(int(old_ids.max()) + 1 if len(old_ids) else 0, -1, dtype=np.int32)
    remap[old_ids[keep]] = np.arange(int(keep.sum()), dtype=np.int32)
    shards = shards.filter(pa.array(keep)).set_column(
        0, "shard_id", pa.array(remap[old_ids[keep]], pa.int32())
    )
    pq.write_table(shards, files["shards"], compression="zstd")
    for name in ("samples", "parts"):
        table = pq.read_table(files[name])
        new_ids = remap[table.column("shard_id").to_numpy()]
        table = table.set_column(0, "shard_id", pa.array(new_ids, pa.int32())).filter(pa.array(new_ids >= 0))
        pq.write_table(table, files[name], compression="zstd")


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

    def shard_rows(self, path: str) -> ShardIndex:
        i = self._by_path[path]
        sid = self.shards.column("shard_id")[i].as_py()
        s0, s1 = self._sample_bounds[sid]
        p0, p1 = self._part_bounds[sid]
        samples = self.samples.slice(s0, s1 - s0)
        parts = self.parts.slice(p0, p1 - p0)
        return ShardIndex(
            sample_keys=samples.column("sample_key").combine_chunks(),
            sample_offsets=samples.column("byte_offset").to_numpy(),
            sample_sizes=samples.column("byte_size").to_numpy(),
            part_sample_index=parts.column("sample_index").to_numpy(),
            part_names=parts.column("part_name").combine_chunks().cast(pa.string()),
            part_offsets=parts.column("content_offset").to_numpy(),
            part_sizes=parts.column("content_size").to_numpy(),
            data_end=self.shards.column("data_end")[i].as_py(),
        )


def _bounds(shard_ids: pa.ChunkedArray, n_shards: int) -> dict[int, tuple[int, int]]:
    ids = shard_ids.to_numpy()
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
        tables[name] = pq.read_table(io.BytesIO(data))
    for name, schema in (("shards", SHARDS_SCHEMA), ("samples", SAMPLES_SCHEMA), ("parts", PARTS_SCHEMA)):
        if tables[name].schema.names != schema.names:
            return None
    return SideIndex(tables["shards"], tables["samples"], tables["parts"])
