"""What a store says about its files: `FileInfo` and `scan` (the recursive, sorted glob behind `Storage.scan`,
`Storage.list_files` and `Storage.stat`).

A local scan follows symlinked folders, as energon's does (its `EPath.glob` / `walk`, and so `energon prepare`,
list the shards under a folder linked into the dataset): a link is listed under its own name. A folder that links
back to one of its own ancestors is not entered (it would be walked forever; energon's glob walks such a loop
until the system refuses the path, 40 links deep)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from energon_arrow.adapters.errors import NotFound, StorageError
from energon_arrow.adapters.urls import glob_to_regex


@dataclass(frozen=True)
class FileInfo:
    """What a store says about one file. `path` is relative to the storage root."""

    path: str
    size: int
    mtime: float | None = None
    etag: str | None = None

    # energon's EPath.stat() gives multi-storage-client's ObjectMetadata: its names for the same facts
    @property
    def content_length(self) -> int:
        return self.size

    @property
    def last_modified(self) -> datetime | None:
        return None if self.mtime is None else datetime.fromtimestamp(self.mtime, timezone.utc)

    @property
    def identity(self) -> str:
        """A string that changes when the file's content (probably) changed: size plus ETag or mtime."""
        return f"{self.size}:{self.etag or ''}:{'' if self.mtime is None else repr(float(self.mtime))}"


def file_info(rel: str, info: Mapping[str, Any]) -> FileInfo:
    """The FileInfo of an fsspec `info` mapping (mtime, LastModified or created; ETag without its quotes)."""
    mtime = info.get("mtime", info.get("LastModified", info.get("created")))
    if hasattr(mtime, "timestamp"):
        mtime = mtime.timestamp()
    etag = info.get("ETag") or info.get("etag")
    return FileInfo(
        rel,
        int(info.get("size") or 0),
        None if mtime is None else float(mtime),
        None if etag is None else str(etag).strip('"'),
    )


def scan(storage, pattern: str = "**/*", hidden: bool = True) -> list[FileInfo]:
    """All files under `storage`'s root whose relative path matches `pattern` (`**` spans directories), sorted;
    `hidden=False`: glob's rule for hidden names (urls.glob_to_regex)."""
    regex = glob_to_regex(pattern, hidden)
    root = storage.path_of("").rstrip("/")
    if storage.is_local:
        return _scan_local(storage.url, root, regex)
    # a missing bucket is NotFound; a missing prefix in a bucket lists as empty
    found = storage._call("", lambda: storage.fs.find(root, detail=True, withdirs=False), "LIST")
    out = []
    for path, info in found.items():
        rel = path[len(root) :].lstrip("/") if path.startswith(root) else path
        if regex.match(rel) and info.get("type", "file") != "directory":
            out.append(file_info(rel, info))
    return sorted(out, key=lambda f: f.path)


def _scan_local(url: str, root: str, regex) -> list[FileInfo]:
    out = []
    if not os.path.isdir(root):
        if os.path.exists(root):
            raise StorageError(url, "is a file, expected a folder")
        raise NotFound(url, "folder not found")
    st = os.stat(root)
    ancestry = {root: {(st.st_dev, st.st_ino)}}  # folder -> the (device, inode) of it and its ancestors
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        dirnames.sort()
        above = ancestry.pop(dirpath)
        entered = []  # a folder leading back to an ancestor is left out: its files are listed under that one
        for name in dirnames:
            child = os.path.join(dirpath, name)
            st = os.stat(child)
            if (st.st_dev, st.st_ino) not in above:
                entered.append(name)
                ancestry[child] = above | {(st.st_dev, st.st_ino)}
        dirnames[:] = entered
        base = os.path.relpath(dirpath, root)
        for name in filenames:
            rel = name if base == "." else f"{base}/{name}".replace(os.sep, "/")
            if regex.match(rel):
                st = os.stat(os.path.join(dirpath, name))
                out.append(FileInfo(rel, st.st_size, st.st_mtime, None))
    return sorted(out, key=lambda f: f.path)
