"""Local shards checked against the side index without one `stat` per shard when a split opens.

Opening a local split lists each folder that holds shards once (`os.listdir`: names only, no per-file stat) and
fails at once, naming the shard, when one is missing. Size, mtime and content fingerprint are compared when a
process first opens a shard to read it (`fstat` of the descriptor it reads through), with the same rules and
the same error as `query.sideindex.verify_shards` (which object stores still use at open: their listing has sizes
and ETags). So opening costs O(folders) system calls, and a changed shard is named at the first read of it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from energon_arrow.adapters import FileInfo, Storage
from energon_arrow.loader.errors import StaleIndexError
from energon_arrow.query.errors import StaleIndexError as QueryStaleIndexError
from energon_arrow.tar.arrow import from_bytes_list


def check_listed(storage: Storage, paths: list[str]) -> None:
    """Raise StaleIndexError naming the first of `paths` (relative, local storage) that its folder does not list:
    one `os.listdir` per folder, no stat."""
    from energon_arrow.query.sideindex import raise_missing

    arr = from_bytes_list(paths, pa.string())  # not pa.array: it imports pandas
    folders = pc.replace_substring_regex(arr, r"(^|/)[^/]*$", "")
    names = pc.replace_substring_regex(arr, r"^.*/", "")
    present = np.zeros(len(arr), bool)
    for folder in pc.unique(folders).to_pylist():
        try:
            listed = os.listdir(storage.local_path(folder))
        except (FileNotFoundError, NotADirectoryError):
            continue  # every shard in it is missing
        mine = pc.equal(folders, folder)
        hit = pc.is_in(names, value_set=from_bytes_list(listed, pa.string()))
        present |= pc.and_(mine, hit).to_numpy(zero_copy_only=False)
    if not present.all():
        raise_missing(storage, paths[int(np.argmin(present))])


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
