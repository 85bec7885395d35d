"""`EPath`: energon's path object (megatron.energon.epathlib.EPath) over energon-arrow's storage.

A path on local disk or behind a URL (`s3://bucket/key`, `msc://profile/key`, `memory://...`), with the pathlib-like
methods energon's EPath has: `/`, `name`, `parent`, `with_suffix`, `relative_to`, `open`, `read_text` /
`read_bytes` / `write_text` / `write_bytes`, `is_file`, `is_dir`, `size`, `stat`, `walk`, `glob`, `copy`, `move`,
`unlink`, `mkdir`, `is_local`, `local_path`, `url`, `display_name`. Every energon-arrow function taking a path takes
one (and energon's own EPath objects). Differences from energon's: writes are atomic (a file appears whole at
close, never partly written); `stat()` returns energon-arrow's `FileInfo` (path, size, mtime, etag) instead of
multi-storage-client's metadata; `storage_options` (credentials, endpoint) may be given and pass to derived paths.
"""

from __future__ import annotations

import io
import os
import posixpath
import re
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from energon_arrow.adapters import open_storage
from energon_arrow.adapters.urls import path_text

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://([^/]*)(.*)$")


class _AtomicWriter(io.BytesIO):
    """Collects what is written; publishes it atomically (`Storage.write_atomic`) when closed without error."""

    def __init__(self, path: EPath):
        super().__init__()
        self._path = path

    def close(self) -> None:
        if not self.closed:
            data = self.getvalue()
            super().close()
            self._path._parent_storage().write_atomic(self._path.name, data)

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:  # an error while writing: nothing is published
            super().close()
            return
        self.close()


class EPath:
    """A local or remote path (see the module docstring)."""

    __slots__ = ("_root", "internal_path", "storage_options")

    def __init__(self, initial_path: Any, storage_options: Mapping[str, Any] | None = None):
        if isinstance(initial_path, EPath):
            self._root, self.internal_path = initial_path._root, initial_path.internal_path
            self.storage_options = dict(storage_options or initial_path.storage_options)
            return
        text = path_text(initial_path)
        m = _URL.match(text)
        if m is None or m.group(1).lower() in ("file", "local"):
            local = text if m is None else m.group(2) + m.group(3)
            self._root, path = "", os.path.abspath(os.path.expanduser(local or "/"))
        else:
            self._root, path = f"{m.group(1).lower()}://{m.group(2)}", m.group(3)
        self.internal_path = PurePosixPath(posixpath.normpath("/" + path.lstrip("/")))
        self.storage_options = dict(storage_options or {})

    def _derived(self, internal_path: PurePosixPath) -> EPath:
        new = EPath(self)
        new.internal_path = PurePosixPath(posixpath.normpath(str(internal_path)))
        return new

    # ---- names --------------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return self._root + str(self.internal_path) if self._root else str(self.internal_path)

    @property
    def name(self) -> str:
        return self.internal_path.name

    @property
    def display_name(self) -> str:
        return self.name

    @property
    def parent(self) -> EPath:
        return self._derived(self.internal_path.parent)

    def with_suffix(self, suffix: str) -> EPath:
        return self._derived(self.internal_path.with_suffix(suffix))

    def relative_to(self, other: EPath) -> str:
        if self._root != EPath(other)._root:
            raise ValueError(f"{self} is not below {other}: different stores")
        return str(self.internal_path.relative_to(EPath(other).internal_path))

    def __truediv__(self, other) -> EPath:
        if isinstance(other, EPath):
            return other
        text = path_text(other)
        if text.startswith("/") or "://" in text:
            return EPath(text, self.storage_options)
        return self._derived(self.internal_path / text)

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"EPath({self.url!r})"

    def __fspath__(self) -> str:
        return self.url

    def __hash__(self) -> int:
        return hash((self._root, self.internal_path))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EPath) and (self._root, self.internal_path) == (
            other._root,
            other.internal_path,
        )

    def __lt__(self, other: EPath) -> bool:
        if self._root != other._root:
            raise ValueError(f"cannot order paths of different stores: {self} and {other}")
        return self.internal_path < other.internal_path

    # ---- storage ------------------------------------------------------------------------------------------
    def _storage(self):
        return open_storage(self.url, self.storage_options)

    def _parent_storage(self):
        return open_storage(self.parent.url, self.storage_options)

    def is_local(self) -> bool:
        return self._root == ""

    def local_path(self) -> Path:
        if not self.is_local():
            raise ValueError(f"{self} is not local")
        return Path(str(self.internal_path))

    def is_file(self) -> bool:
        parent = self._parent_storage()
        return parent.exists(self.name) and not parent.isdir(self.name)

    def is_dir(self) -> bool:
        return self._parent_storage().isdir(self.name) if self.name else self._storage().isdir()

    def size(self) -> int:
        return self.stat().size

    def stat(self):
        return self._parent_storage().stat(self.name)

    def mkdir(self, exist_ok: bool = True, parents: bool = False) -> None:
        if self.is_local():  # object stores have no folders: nothing to make there
            Path(str(self.internal_path)).mkdir(exist_ok=exist_ok, parents=parents)

    # ---- content ------------------------------------------------------------------------------------------
    def open(self, mode: str = "r", block_size: int | None = None, prefetch_file: bool = False):
        """Read ("r", "rb") or write ("w", "wb": atomic, published at close) the file."""
        if mode not in ("r", "rb", "w", "wb"):
            raise ValueError(f"{self}: mode must be 'r', 'rb', 'w' or 'wb', got {mode!r}")
        if mode.startswith("w"):
            raw: Any = _AtomicWriter(self)
        elif prefetch_file:
            raw = io.BytesIO(self.read_bytes())
        elif self.is_local():
            raw = open(str(self.internal_path), "rb")  # noqa: SIM115 - returned to the caller, who closes it
        else:
            storage = self._parent_storage()
            # multi-storage-client's filesystem passes its arguments to its own open(), which has no block size
            sized = {} if storage.protocol == "msc" else {"block_size": block_size or 8 * 1024 * 1024}
            raw = storage.fs.open(storage.path_of(self.name), "rb", **sized)
        return raw if mode.endswith("b") else io.TextIOWrapper(raw, encoding="utf-8")

    def read_bytes(self) -> bytes:
        return self._parent_storage().read_bytes(self.name)

    def read_text(self) -> str:
        return self.read_bytes().decode("utf-8")

    def write_bytes(self, data: bytes) -> None:
        self._parent_storage().write_atomic(self.name, bytes(data))

    def write_text(self, text: str) -> None:
        self.write_bytes(text.encode("utf-8"))

    # ---- folders ------------------------------------------------------------------------------------------
    def walk(self) -> Iterator[EPath]:
        """Every file below this path (no folders)."""
        for rel in self._storage().list_files("**/*"):
            yield self._derived(self.internal_path / rel)

    def glob(self, pattern: str) -> Iterator[EPath]:
        """Files below this path whose relative path matches `pattern` (`**` spans folders; wildcards do not
        match hidden names, as energon's glob)."""
        for rel in self._storage().list_files(pattern, hidden=False):
            yield self._derived(self.internal_path / rel)

    def copy(self, target: EPath) -> None:
        """Copy this file, or every file below this folder, to `target` (possibly another store)."""
        target = EPath(target)
        if self.is_file():
            target.write_bytes(self.read_bytes())
            return
        for path in self.walk():
            (target / path.relative_to(self)).write_bytes(path.read_bytes())

    def move(self, target: EPath) -> None:
        folder = not self.is_file()
        self.copy(target)
        if folder:
            self._parent_storage().remove(self.name, recursive=True)
        else:
            self.unlink()

    def unlink(self) -> None:
        self._parent_storage().remove(self.name)
