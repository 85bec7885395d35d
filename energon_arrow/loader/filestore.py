"""Random access by name: energon's `FileStore` interface over a prepared WebDataset or a plain folder.

`PartStore(dataset)["<sample key>.<part>"]` returns `(payload, source_info)` like energon's WebdatasetFileStore;
a bare sample key returns the dict of all its parts. The name -> (shard, offset, size) table comes from the query
layer (one SQL over the Parquet side index) and is turned into a hash map on first use in each process; reads
are `pread`s on cached file descriptors (local) or ranged GETs (object stores); `get_many` reads several names at
once (coalesced, concurrent GETs).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from energon_arrow.adapters import Storage, open_storage
from energon_arrow.epathlib import EPath
from energon_arrow.loader.errors import LoaderError
from energon_arrow.loader.filestore_api import FileStore
from energon_arrow.loader.members import split_sample
from energon_arrow.loader.shard_files import ShardFiles
from energon_arrow.samples.decoders import PartDecoder
from energon_arrow.samples.sample import SourceInfo


class _FileStoreBase(FileStore):
    decoder: PartDecoder | None = None
    storage: Storage
    _media = None  # energon_arrow.index.media_tables.MediaLookup, opened on the first get_media_metadata

    def _decode(self, name: str, data: bytes) -> Any:
        return data if self.decoder is None else self.decoder.decode(name, data)

    def _has(self, key: str) -> bool:  # whether `key` names a part or file of this store
        raise NotImplementedError

    def get_media_metadata(self, key: str) -> Any:
        """The media metadata stored for `key` (`<sample key>.<part>`, or a file's relative path in a folder) by
        `prepare --media-metadata-by-...` / `prepare-media` (energon's too). RuntimeError when the dataset has
        none, KeyError when `key` has none."""
        from energon_arrow.index.media_tables import PREPARE_HINT, open_media_lookup
        from energon_arrow.media import deserialize_media_metadata

        if self._media is None:
            self._media = open_media_lookup(self.storage)
        row = self._media.get(key)
        if row is None:
            if self._has(key):
                raise KeyError(
                    f"{self.storage.url}: media metadata missing for {key!r} (not media under the filter it was "
                    f"prepared with?). {PREPARE_HINT}"
                )
            raise KeyError(f"{self.storage.url}: no file named {key!r}")
        return deserialize_media_metadata(*row)


class PartStore(_FileStoreBase):
    """Parts (and whole samples) of a prepared WebDataset by name."""

    def __init__(self, path: Any, storage_options: dict | None = None, decoder: PartDecoder | None = None):
        from energon_arrow.query import Dataset, open_dataset

        ds = path if isinstance(path, Dataset) else open_dataset(path, storage_options)
        self.storage: Storage = ds.storage
        self.decoder = decoder
        parts = ds.sql(
            "SELECT shard_id, sample_key, part_name::VARCHAR AS part_name, content_offset, content_size "
            "FROM sample_parts"
        ).arrow()
        samples = ds.sql("SELECT shard_id, sample_key, byte_offset, byte_size FROM samples").arrow()
        shards = ds.sql("SELECT shard_id, path FROM shards ORDER BY shard_id").arrow()
        self.shard_paths = dict(zip(shards["shard_id"].to_pylist(), shards["path"].to_pylist()))
        self._url = self.storage.url  # per-read work below is kept to dict lookups and one pread
        self._root = EPath(self._url)  # energon's SourceInfo.dataset_path
        self._local_paths = (
            {sid: self.storage.local_path(rel) for sid, rel in self.shard_paths.items()}
            if self.storage.is_local
            else None
        )
        names = pc.binary_join_element_wise(parts["sample_key"], parts["part_name"], ".")
        self._names = pa.concat_arrays([names.combine_chunks(), samples["sample_key"].combine_chunks()])
        self._shard = np.concatenate([parts["shard_id"].to_numpy(), samples["shard_id"].to_numpy()]).astype(
            np.int32
        )
        self._offset = np.concatenate([parts["content_offset"].to_numpy(), samples["byte_offset"].to_numpy()])
        self._size = np.concatenate([parts["content_size"].to_numpy(), samples["byte_size"].to_numpy()])
        self._n_parts = len(parts)
        self._lookup: dict[str, int] | None = None
        self._files = ShardFiles()

    def __len__(self) -> int:
        return self._n_parts

    def get_path(self) -> str:
        return self.storage.url

    def _has(self, key: str) -> bool:
        try:
            return self._row(key) < self._n_parts
        except LoaderError:
            return False

    def _row(self, key: str) -> int:
        if self._lookup is None:
            self._lookup = dict(zip(self._names.to_pylist(), range(len(self._names))))
        row = self._lookup.get(key)
        if row is None:
            raise LoaderError(f"{self.storage.url}: no part or sample named {key!r}")
        return row

    def _pread(self, row: int) -> bytes:
        """The bytes of one table row from a local shard (one `pread` on a cached descriptor)."""
        sid, offset, size = self._shard.item(row), self._offset.item(row), self._size.item(row)
        data = os.pread(self._files.fd(self._local_paths[sid]), size, offset)
        if len(data) != size:
            raise LoaderError(f"{self._local_paths[sid]}: short read at byte {offset} (stale index?)")
        return data

    def _read_rows(self, rows: list[int]) -> list:
        """The bytes of the given table rows: one coalesced `read_ranges` on object stores (nearby ranges in one
        GET, the GETs concurrent), `pread`s on cached descriptors locally."""
        if self._local_paths is not None:
            return [self._pread(r) for r in rows]
        rels = [self.shard_paths[int(self._shard[r])] for r in rows]
        return self.storage.read_ranges(rels, self._offset[rows], self._size[rows])

    def _entry(self, key: str, row: int, data) -> tuple[Any, SourceInfo]:
        """`self[key]` from the bytes of its row: the decoded part, or the dict of a whole sample's parts."""
        shard = self.shard_paths[self._shard.item(row)]
        source = SourceInfo(self._root, key, shard, (key,))
        if row < self._n_parts:
            return self._decode(key, bytes(data)), source
        where = f"{self.storage.url_of(shard)}@{int(self._offset[row])}"
        _, parts = split_sample(memoryview(data), where)
        return {p: self._decode(f"{key}.{p}", bytes(v)) for p, v in parts.items()}, source

    def __getitem__(self, key: str) -> tuple[Any, SourceInfo]:
        row = self._row(key)
        data = self._pread(row) if self._local_paths is not None else self._read_rows([row])[0]
        return self._entry(key, row, data)

    def get_many(self, keys: list[str]) -> list[tuple[Any, SourceInfo]]:
        """`self[key]` for every key, read together (see `_read_rows`): for callers that know several names at
        once, such as FileStoreCachePool draining its queue of lazy reads."""
        rows = [self._row(k) for k in keys]
        return [self._entry(k, r, d) for k, r, d in zip(keys, rows, self._read_rows(rows))]

    def close(self) -> None:
        self._files.close()

    def __del__(self):
        files = getattr(self, "_files", None)  # None: __init__ failed
        if files is not None:
            files.close()


class FolderStore(_FileStoreBase):
    """Files of a plain folder (local or object store) by relative path."""

    def __init__(self, path: Any, storage_options: dict | None = None, decoder: PartDecoder | None = None):
        self.storage = open_storage(path, storage_options)
        self.decoder = decoder
        self._root = EPath(self.storage.url)  # energon's SourceInfo.dataset_path

    def get_path(self) -> str:
        return self.storage.url

    def _has(self, key: str) -> bool:
        return self.storage.exists(key)

    def __getitem__(self, key: str) -> tuple[Any, SourceInfo]:
        from energon_arrow.adapters import NotFound

        try:
            data = self.storage.read_bytes(key)
        except NotFound:
            raise LoaderError(f"{self.storage.url_of(key)}: auxiliary file not found") from None
        return self._decode(key, data), SourceInfo(
            dataset_path=self._root, index=key, shard_name=self.storage.url, file_names=(key,)
        )


class SystemFileStore(FolderStore):
    """energon's SystemFileStore: files by name under `base_dir` (local or object store URL); without a base_dir,
    keys are local file paths."""

    def __init__(self, base_dir: Any = None, storage_options: dict | None = None):
        super().__init__("/" if base_dir is None else base_dir, storage_options)
        self.base_dir = base_dir

    def __getitem__(self, key: str) -> tuple[Any, SourceInfo]:
        if self.base_dir is None and not os.path.isabs(key):
            raise LoaderError(f"SystemFileStore without base_dir: {key!r} is not an absolute path")
        return super().__getitem__(key.lstrip("/") if self.base_dir is None else key)

    def __str__(self) -> str:
        return f"SystemFileStore(base_dir={self.base_dir})"

    def get_media_metadata(self, key: str) -> Any:
        if self.base_dir is None:
            raise RuntimeError("Media metadata requires a base directory for SystemFileStore")
        return super().get_media_metadata(key)


def open_file_store(path: Any, storage_options: dict | None = None, decoder: PartDecoder | None = None):
    """A PartStore for a prepared dataset, a FolderStore for anything else (`filesystem://` forces a folder)."""
    from energon_arrow.meta import info_exists

    if isinstance(path, str) and path.startswith("filesystem://"):
        return FolderStore(path[len("filesystem://") :], storage_options, decoder)
    storage = open_storage(path, storage_options)
    if info_exists(storage):
        return PartStore(storage, storage_options, decoder)
    return FolderStore(storage, storage_options, decoder)
