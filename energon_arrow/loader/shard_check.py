"""Local shards checked against the side index without one `stat` per shard when a split opens.

Opening a local split lists each folder that holds shards once (`os.scandir`: names only, no per-file stat) and
fails at once, naming the shard, when one is missing. Size, mtime and content fingerprint are compared when a
process first opens a shard to read it (`fstat` of the descriptor it reads through), with the same rules and
the same error as `query.sideindex.verify_shards` (which object stores still use at open: their listing has sizes
and ETags). So opening costs O(folders) system calls, and a changed shard is named at the first read of it.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from energon_arrow.adapters import FileInfo, Storage
from energon_arrow.loader.errors import StaleIndexError
from energon_arrow.query.errors import StaleIndexError as QueryStaleIndexError

log = logging.getLogger(__name__)


def shard_folders(paths: pa.Array) -> list[str]:
    """The distinct folders (relative, "" for the root) of relative shard paths."""
    return pc.unique(pc.replace_substring_regex(paths, r"(^|/)[^/]*$", "")).to_pylist()


def check_listed(storage: Storage, paths: list[str]) -> None:
    """Raise StaleIndexError naming the first of `paths` (relative, local storage) that no folder lists: one
    `os.scandir` per folder, no stat."""
    from energon_arrow.query.sideindex import raise_missing

    arr = pa.array(paths, pa.string())
    listed: list[str] = []
    for folder in shard_folders(arr):
        prefix = f"{folder}/" if folder else ""
        try:
            with os.scandir(storage.local_path(folder)) as entries:
                listed.extend(prefix + e.name for e in entries)
        except (FileNotFoundError, NotADirectoryError):
            continue  # every shard in it is missing
    missing = pc.invert(pc.is_in(arr, value_set=pa.array(listed, pa.string())))
    if pc.any(missing).as_py():
        raise_missing(storage, paths[int(pc.index(missing, True).as_py())])


@dataclass
class ShardCheck:
    """The recorded identity of each shard (the side index's shards table: path, size, mtime, etag, data_end,
    fingerprint; row i is shard id i), checked once per process when the shard is first opened."""

    storage: Storage
    shards: pa.Table
    _checked: np.ndarray = field(init=False, repr=False)
    _warned: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        self._checked = np.zeros(self.shards.num_rows, bool)

    def opened(self, shard: int, fd: int) -> None:
        """Compare shard `shard` (read through `fd`) with its recorded identity; StaleIndexError names it when
        it changed since it was indexed."""
        if self._checked[shard]:
            return
        from energon_arrow.query.sideindex import compare_shards, warn_unverified

        row = self.shards.slice(shard, 1)
        path = row.column("path")[0].as_py()
        st = os.fstat(fd)
        try:
            unverified = compare_shards(
                self.storage, row, {path: FileInfo(path, st.st_size, st.st_mtime, None)}
            )
        except QueryStaleIndexError as exc:  # the loader's own class (a subclass), raised while reading
            raise StaleIndexError(str(exc)) from None
        if unverified and not self._warned:  # once per process, not once per shard
            warn_unverified(self.storage, unverified)
            self._warned = True
        self._checked[shard] = True
