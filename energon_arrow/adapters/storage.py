"""`Storage`: the one I/O interface of energon-arrow, over fsspec (local, memory, S3 and other fsspec protocols).

Its clients (fsspec filesystems, the direct S3 client) are built in adapters.backends, listings in adapters.listing,
ranged reads in adapters.fetch, publishing in adapters.publish."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from energon_arrow.adapters import (
    after_fork,  # noqa: F401 - registers the after-fork hook
    listing,
    secrets,
)
from energon_arrow.adapters import options as opts
from energon_arrow.adapters.backends import Backends
from energon_arrow.adapters.errors import NotFound, NotLocal, StorageError, classify
from energon_arrow.adapters.fetch import fetch_groups, read_ranges
from energon_arrow.adapters.io_settings import pop_io_settings
from energon_arrow.adapters.listing import FileInfo
from energon_arrow.adapters.msc import MSC_PREFIX, resolve_msc_url
from energon_arrow.adapters.retry import RetryPolicy, call_with_retries
from energon_arrow.adapters.shard_cache import parse_cache_option
from energon_arrow.adapters.stream import LocalStream, PrefetchReader
from energon_arrow.adapters.urls import DSS_PREFIX, join_path, parse_url, path_text, resolve_dss_url


class Storage(Backends):
    """A storage root (local folder, `memory://x`, `s3://bucket/prefix`) and relative-path I/O under it.

    All methods take POSIX paths relative to the root. Errors are StorageError subclasses naming the URL;
    transient failures are retried per `retry`. Credentials never appear in repr, errors or pickles.
    """

    # Coalescing (read_ranges): ranges closer than `range_gap` bytes are fetched as one; the starts within one
    # fetch lie within `max_fetch` bytes. Remote stores: 1 MiB gap (reading 1 MiB costs less than one more
    # request's latency; the same default as Rust's object_store), 8 MiB fetches fetched in parallel.
    # Local files: 64 KiB, 32 MiB. Both are instance attributes that callers may change.
    LOCAL_COALESCING = (64 * 1024, 32 * 1024 * 1024)
    REMOTE_COALESCING = (1024 * 1024, 8 * 1024 * 1024)
    # S3 byte ranges through the lean direct client (adapters.s3direct) when the options allow it
    use_direct_reads = True

    def __init__(
        self, url, storage_options: Mapping[str, Any] | None = None, retry: RetryPolicy | None = None
    ):
        if storage_options is None:  # a path object may carry its options (energon_arrow.epathlib.EPath)
            storage_options = getattr(url, "storage_options", None)
        url = path_text(url)
        if url.startswith(DSS_PREFIX):
            url = resolve_dss_url(url)
        if url.startswith(MSC_PREFIX):
            url, storage_options = resolve_msc_url(url, storage_options)
        self._parsed = parse_url(url)
        head = self._parsed.path.lstrip("/").split("/", 1)
        if not self.is_local and "@" in head[0]:  # s3://KEY:SECRET@bucket/...: never echo it back
            shown = f"{self.protocol}://***@" + "/".join([head[0].rsplit("@", 1)[1], *head[1:]])
            raise opts.InvalidStorageOptions(
                shown, "credentials in the URL are not supported: pass them as storage options"
            )
        if storage_options is not None and not isinstance(storage_options, Mapping):
            raise opts.InvalidStorageOptions(
                self.url, f"storage options must be a mapping, got {type(storage_options).__name__}"
            )
        raw = dict(storage_options or {})
        self.io_settings = pop_io_settings(raw, self.url, self.protocol, retry is not None)
        self.retry = self.io_settings.retry_policy(retry)
        self.local_cache = parse_cache_option(raw.pop("local_cache", None), self.url)
        if self.local_cache is not None and self.is_local:
            raise opts.InvalidStorageOptions(
                self.url, "local_cache is for object stores: these files are local"
            )
        self._public, secret = secrets.split_secrets(self._validate(raw))
        self._secret_handle = secrets.stash_secrets(secret)
        self._forget_clients()
        self.range_gap, self.max_fetch = (
            self.LOCAL_COALESCING if self.is_local or self.protocol == "memory" else self.REMOTE_COALESCING
        )
        if not (self.is_local and not raw):  # local files without options: plain os calls, no fsspec import
            _ = self.fs  # construct now so that bad options fail at open time

    # ---- pickling -----------------------------------------------------------------------------------------
    def __getstate__(self):
        return {
            "url": self._parsed.url(),
            "public": self._public,
            "credentials_handle": self._secret_handle,
            "retry": self.retry,
            "coalescing": (self.range_gap, self.max_fetch),
            "direct_reads": self.use_direct_reads,
            "local_cache": self.local_cache,
            "io_settings": self.io_settings,
        }

    def __setstate__(self, state):
        self._parsed = parse_url(state["url"])
        self._public = state["public"]
        self._secret_handle = state["credentials_handle"]
        self.retry = state["retry"]
        self.range_gap, self.max_fetch = state["coalescing"]
        self.use_direct_reads = state["direct_reads"]
        self.local_cache = state["local_cache"]
        self.io_settings = state["io_settings"]
        self._forget_clients()

    def __repr__(self):
        endpoint = self._public.get("endpoint_url")
        return f"Storage({self.url!r}{f', endpoint_url={endpoint!r}' if endpoint else ''})"

    def __eq__(self, other):
        return isinstance(other, Storage) and self.__getstate__() == other.__getstate__()

    def __hash__(self):
        return hash((self.url, self._secret_handle))

    # ---- naming -------------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return self._parsed.url()

    @property
    def protocol(self) -> str:
        return self._parsed.protocol

    @property
    def is_local(self) -> bool:
        return self._parsed.is_local

    @property
    def storage_options(self) -> dict[str, Any]:
        """Options including credentials, for handing to other fsspec-aware libraries in this process."""
        return opts.merge_options(self._public, secrets.recall_secrets(self._secret_handle))

    def url_of(self, rel: str = "") -> str:
        return (
            self._parsed.url()
            if not rel
            else (join_path(self.url, rel) if not self.is_local else os.path.join(self._parsed.path, rel))
        )

    def path_of(self, rel: str = "") -> str:
        """The backend path (what fsspec methods take) for a relative path."""
        return join_path(self._parsed.path, rel)

    def local_path(self, rel: str = "") -> str:
        if not self.is_local:
            raise NotLocal(self.url_of(rel), "not a local file")
        return self.path_of(rel)

    def child(self, rel: str) -> Storage:
        """A Storage rooted at `rel` below this one, sharing options and credentials."""
        new = object.__new__(Storage)
        new.__setstate__({**self.__getstate__(), "url": self.url_of(rel)})
        return new

    def _call(self, rel: str, fn, op: str | None = None):
        """`fn()` retried per `retry`; errors name the URL, the operation `op` and the attempts made."""
        return call_with_retries(fn, self.url_of(rel), self.retry, op=op)

    # ---- metadata -----------------------------------------------------------------------------------------
    def exists(self, rel: str = "") -> bool:
        if self.is_local:
            return os.path.exists(self.path_of(rel))
        return self._call(rel, lambda: self.fs.exists(self.path_of(rel)), "HEAD")

    def missing_root(self) -> str | None:
        """Why nothing is stored at this storage's root (no such folder, bucket or prefix), None when something
        is: the reason a "not prepared" error should give instead when the path itself is wrong."""
        if self.exists(""):
            return None
        if self.is_local:
            return "no such folder"
        bucket = self.path_of("").split("/", 1)[0]
        if self.protocol == "s3" and not self._call("", lambda: self.fs.exists(bucket), "HEAD"):
            return (
                f"bucket {bucket!r} not found (no such bucket, credentials that cannot see it, or an endpoint "
                "that is not an S3 server)"
            )
        return "nothing is stored under this prefix"

    def isdir(self, rel: str = "") -> bool:
        if self.is_local:
            return os.path.isdir(self.path_of(rel))
        return self._call(rel, lambda: self.fs.isdir(self.path_of(rel)), "HEAD")

    def stat(self, rel: str) -> FileInfo:
        if self.is_local:
            path = self.path_of(rel)
            try:
                st = os.stat(path)
            except OSError as exc:
                raise classify(exc, self.url_of(rel)) from None
            return FileInfo(rel, st.st_size, st.st_mtime, None)
        info = self._call(rel, lambda: self.fs.info(self.path_of(rel)), "HEAD")
        if info.get("type") == "directory":
            raise StorageError(self.url_of(rel), "is a directory, expected a file")
        return listing.file_info(rel, info)

    def scan(self, pattern: str = "**/*", hidden: bool = True) -> list[FileInfo]:
        """All files under the root whose relative path matches `pattern` (`**` spans directories), sorted;
        `hidden=False`: glob's rule for hidden names (urls.glob_to_regex)."""
        return listing.scan(self, pattern, hidden)

    def list_files(self, pattern: str = "**/*", hidden: bool = True) -> list[str]:
        return [f.path for f in self.scan(pattern, hidden)]

    # ---- reads --------------------------------------------------------------------------------------------
    def read_bytes(self, rel: str) -> bytes:
        if self.is_local:
            try:
                with open(self.path_of(rel), "rb") as f:
                    return f.read()
            except OSError as exc:
                raise classify(exc, self.url_of(rel)) from None
        direct = self._direct
        if direct is not None:
            return self._call(rel, lambda: direct.get(*self.path_of(rel).split("/", 1)), "GET")
        return self._call(rel, lambda: self.fs.cat_file(self.path_of(rel)), "GET")

    def read_text(self, rel: str, encoding: str = "utf-8") -> str:
        data = self.read_bytes(rel)
        try:
            return data.decode(encoding)
        except UnicodeDecodeError as exc:
            raise StorageError(self.url_of(rel), f"not valid {encoding} at byte offset {exc.start}") from None

    def read_range(self, rel: str, offset: int, size: int) -> bytes:
        """Exactly `size` bytes at `offset`; a StorageError naming the URL and offset if the file is shorter."""
        return bytes(self._read_range_buffer(rel, offset, size))

    def _read_range_buffer(self, rel: str, offset: int, size: int):
        """read_range without the final copy: bytes or bytearray."""
        if size == 0:
            return b""
        return fetch_groups(self, [rel], [offset], [offset + size])[0]

    def read_ranges(self, rels: str | Sequence[str], offsets, sizes) -> list[memoryview]:
        """Many ranges at once, results in request order. Nearby ranges of a file are coalesced into one
        fetch; remote fetches run concurrently. `rels` is one path for all ranges, or one path per range."""
        return read_ranges(self, rels, offsets, sizes)

    def open_stream(self, rel: str, block_size: int = 8 * 1024 * 1024, depth: int = 4):
        """A forward-only binary reader. Local: a buffered file. Remote: `depth` blocks fetched ahead."""
        if self.is_local:
            try:
                return LocalStream(self.path_of(rel), block_size)
            except OSError as exc:
                raise classify(exc, self.url_of(rel)) from None
        info = self.stat(rel)
        pins = {rel: info.etag} if info.etag else {}  # every block from the version whose size we read

        def fetch(offset: int, n: int):
            return fetch_groups(self, [rel], [offset], [offset + n], pins)[0]

        return PrefetchReader(fetch, info.size, block_size, depth, self.url_of(rel))

    def iter_chunks(self, rel: str, block_size: int = 8 * 1024 * 1024) -> Iterator[bytes]:
        with self.open_stream(rel, block_size) as f:
            while chunk := f.read(block_size):
                yield chunk

    def mmap(self, rel: str, dtype=np.uint8, offset: int = 0, count: int = -1) -> np.ndarray:
        """A read-only, zero-copy numpy view of a local file (empty array for an empty file)."""
        path = self.local_path(rel)
        dtype = np.dtype(dtype)
        try:
            size = os.path.getsize(path)
        except OSError as exc:
            raise classify(exc, self.url_of(rel)) from None
        avail = (size - offset) // dtype.itemsize
        if count < 0:
            count = avail
        if offset > size or count > avail:
            raise StorageError(
                self.url_of(rel), f"mmap of {count} x {dtype} at offset {offset} beyond size {size}"
            )
        if count == 0:
            return np.empty(0, dtype)
        return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=(count,))

    # ---- writes -------------------------------------------------------------------------------------------
    def makedirs(self, rel: str = "") -> None:
        if self.is_local:
            self._call(rel, lambda: os.makedirs(self.path_of(rel), exist_ok=True))
            return
        self._call(rel, lambda: self.fs.makedirs(self.path_of(rel), exist_ok=True), "MKDIR")

    def remove(self, rel: str, recursive: bool = False) -> None:
        """Delete a file (or, with `recursive`, a folder). A file that is already gone is not an error."""
        path = self.path_of(rel)
        if not recursive:
            with contextlib.suppress(NotFound):
                self._call(rel, lambda: os.remove(path) if self.is_local else self.fs.rm_file(path), "DELETE")
            return
        try:
            self._call(
                rel,
                lambda: _remove_local_tree(path) if self.is_local else self.fs.rm(path, recursive=True),
                "DELETE",
            )
        except NotFound:
            return
        if not self.is_local:  # s3fs's bulk delete drops per-key errors: check that nothing is left
            found = self._call(rel, lambda: self.fs.find(path, detail=True), "LIST")
            # a store may keep an emptied folder's entry (SeaweedFS does): only files count as left over
            left = [k for k, info in found.items() if info.get("type") != "directory"]
            if left:
                raise StorageError(
                    self.url_of(rel),
                    f"could not delete {len(left)} object(s), e.g. {left[0]!r} (permission denied?)",
                )

    def write_atomic(self, rel: str, data: bytes | str) -> None:
        """Publish one small file: readers see the old content or the new, never a partial file."""
        from energon_arrow.adapters.publish import write_atomic

        write_atomic(self, rel, data.encode() if isinstance(data, str) else data)

    def publish_folder(
        self,
        rel_dir: str,
        files: Mapping[str, bytes | os.PathLike],
        keep_existing: bool = True,
        drop: Sequence[str] = (),
        remove_old: bool = True,
    ) -> str | None:
        """Replace the files of a folder as one set (see adapters.publish)."""
        from energon_arrow.adapters.publish import publish_folder

        return publish_folder(self, rel_dir, files, keep_existing, drop, remove_old)


def _remove_local_tree(path: str) -> None:
    """A local folder with its contents, or a file (fsspec's LocalFileSystem.rm with recursive=True)."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.remove(path)


def open_storage(
    url, storage_options: Mapping[str, Any] | None = None, retry: RetryPolicy | None = None
) -> Storage:
    """Open a storage root from a URL (`/path`, `file:///path`, `s3://bucket/prefix`, `memory://name`)."""
    if isinstance(url, Storage):
        return url
    return Storage(url, storage_options, retry)
