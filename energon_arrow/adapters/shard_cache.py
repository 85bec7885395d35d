"""A node-local disk cache of whole remote files (shards), shared by the workers and ranks of one node.

Turned on by the storage option `local_cache` (a folder, or `{"path": folder, "max_bytes": n}`); off by default.
An entry is one complete copy of a file, named after a hash of its URL plus its size and CRC-32
(`ab/<hash>-<size>-<crc32>.shard`), so a reader can tell a damaged entry from a good one:

- fills are exclusive: the process that creates `<hash>.lock` with O_EXCL fetches the file (a stream of large
  ranged GETs, retried and pinned to one object version) into a temporary name and renames it into place; the
  others wait for the entry (a lock whose process has died is taken over);
- an entry is verified once per node, not once per process: the fill (which computes the CRC-32 of the bytes as
  received) or the first process to check an entry in full (size, then CRC-32) records it in a marker,
  `<entry>.verified`, holding the entry's identity (device, inode, size, mtime in ns; written under a temporary
  name and renamed). A process using an entry for the first time trusts a marker that matches the entry's
  identity now (one `stat` and one small read) and checks the entry in full otherwise; a bad entry is deleted
  with its marker and fetched again. The entry's mtime is set 2 s into the past when it is marked (and use
  updates only its atime, the LRU clock), so any later write, truncation or replacement gives it another
  identity, whatever the file system's timestamp granularity. Not detected: changes that keep the identity
  (media corruption under an unchanged inode, a write whose mtime is put back, the clock stepped back by more
  than 2 s); deleting the markers makes every entry be checked in full again (docs/storage.md);
- after a process has filled 1/256 of `max_bytes` (or at least one file) since it last looked, the least recently
  used entries are deleted until the cache holds at most `max_bytes` (deleting a file another process has open is
  safe on POSIX: its descriptor stays valid). Looking lists and stats every entry (60 ms for 10,000): done after
  every fill it made the first epoch over a dataset of N shards cost O(N^2) (10 minutes per epoch and rank at
  10,000 shards). So the cache may exceed `max_bytes` by up to 1/256 of it plus one file per process filling it.

The cache trusts that an object does not change under an unchanged URL, as the dataset index does: after
replacing shards, prepare again and clear the cache folder.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import socket
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

from energon_arrow.adapters.errors import InvalidStorageOptions, StorageError

FILL_BLOCK = 8 * 1024 * 1024  # bytes per ranged GET while filling
FILL_TIMEOUT = 3600.0  # seconds after which a fill lock is considered abandoned
MARKED_AGE_NS = 2_000_000_000  # a marked entry's mtime lies this far in the past: later writes stamp another
MARKER = ".verified"
_POLL = 0.02


@dataclass(frozen=True)
class CacheSpec:
    path: str
    max_bytes: int


def parse_cache_option(value, url: str) -> CacheSpec | None:
    """The `local_cache` storage option: a folder (the cache may then fill half of its disk's free space at
    open time) or a mapping with `path` and `max_bytes`."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        unknown = set(value) - {"path", "max_bytes"}
        if unknown or "path" not in value:
            raise InvalidStorageOptions(
                url,
                f"local_cache takes a folder or {{'path': folder, 'max_bytes': n}}, got keys {sorted(value)}",
            )
        path, max_bytes = os.fspath(value["path"]), value.get("max_bytes")
    elif isinstance(value, (str, os.PathLike)):
        path, max_bytes = os.fspath(value), None
    else:
        raise InvalidStorageOptions(
            url, f"local_cache must be a folder path or a mapping, got {type(value).__name__}"
        )
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise InvalidStorageOptions(
            url, f"local_cache folder {path!r} cannot be created: {exc.strerror}"
        ) from None
    if max_bytes is None:
        max_bytes = shutil.disk_usage(path).free // 2
    if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 1:
        raise InvalidStorageOptions(
            url, f"local_cache max_bytes must be a positive integer, got {max_bytes!r}"
        )
    return CacheSpec(os.path.abspath(path), max_bytes)


def _entry_name(key: str, size: int, crc: int) -> str:
    return f"{key}-{size}-{crc:08x}.shard"


def _parse_entry(name: str) -> tuple[str, int, int] | None:
    if not name.endswith(".shard"):
        return None
    try:
        key, size, crc = name[: -len(".shard")].split("-")
        return key, int(size), int(crc, 16)
    except ValueError:
        return None


def _crc_of(path: str) -> tuple[int, os.stat_result]:
    """The CRC-32 of a file's bytes and its status before they were read."""
    crc = 0
    with open(path, "rb", buffering=0) as f:
        st = os.fstat(f.fileno())
        while block := f.read(FILL_BLOCK):
            crc = zlib.crc32(block, crc)
    return crc, st


def _identity(st: os.stat_result) -> str:
    return f"{st.st_dev} {st.st_ino} {st.st_size} {st.st_mtime_ns}"


def _marked(path: str) -> bool:
    """Whether the entry's marker matches its identity now (it was verified and not changed since)."""
    try:
        with open(path + MARKER) as f:
            recorded = f.read()
        return recorded == _identity(os.stat(path))
    except OSError:
        return False


def _mark(path: str, st: os.stat_result) -> None:
    """Record the verified entry `path` (status `st`, read before its bytes were checked): its mtime is moved
    into the past first, so that any later change stamps another one (see the module docstring). Nothing is
    recorded if the entry changed meanwhile."""
    old = min(st.st_mtime_ns, time.time_ns() - MARKED_AGE_NS)
    try:
        if old != st.st_mtime_ns:
            if _identity(os.stat(path)) != _identity(st):
                return
            os.utime(path, ns=(st.st_atime_ns, old))
        now = os.stat(path)
        if (now.st_ino, now.st_size, now.st_mtime_ns) != (st.st_ino, st.st_size, old):
            return
        folder, name = os.path.split(path)
        tmp = os.path.join(folder, f".tmp-{name}-{os.getpid()}-{os.urandom(4).hex()}")
        try:
            with open(tmp, "w") as f:
                f.write(_identity(now))
            os.replace(tmp, path + MARKER)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
    except OSError:  # evicted meanwhile, or not ours to change: checked in full by the next process
        return


def _remove_entry(path: str) -> None:
    for p in (path, path + MARKER):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p)


class ShardCache:
    """`local_copy(storage, rel)`: the path of a checked local copy of a remote file, fetched if needed."""

    def __init__(self, spec: CacheSpec):
        self.spec = spec
        self._checked: dict[str, str] = {}  # key -> entry path checked by this process
        self._pid = os.getpid()
        self._filled = 0  # bytes this process filled since it last evicted

    def _folder(self, key: str) -> str:
        return os.path.join(self.spec.path, key[:2])

    def local_copy(self, storage, rel: str) -> str:
        if self._pid != os.getpid():
            self._checked, self._pid, self._filled = {}, os.getpid(), 0
        key = hashlib.sha256(storage.url_of(rel).encode()).hexdigest()[:32]
        path = self._checked.get(key)
        if path is not None and os.path.exists(path):
            return path
        folder = self._folder(key)
        os.makedirs(folder, exist_ok=True)
        waited = 0.0
        while True:
            path = self._find(folder, key)
            if path is not None:
                self._checked[key] = path
                return path
            lock = os.path.join(folder, f"{key}.lock")
            try:
                fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                if _abandoned(lock):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(lock)
                    continue
                time.sleep(_POLL)
                waited += _POLL
                if waited > FILL_TIMEOUT:
                    raise StorageError(
                        storage.url_of(rel), f"gave up waiting for the cache fill lock {lock}"
                    ) from None
                continue
            try:
                os.write(fd, f"{socket.gethostname()} {os.getpid()}".encode())
                os.close(fd)
                if self._find(folder, key) is None:  # another process may have published it meanwhile
                    path = self._fill(storage, rel, folder, key)
                    self._filled += os.path.getsize(path)
                    if self._filled >= self.spec.max_bytes // 256:
                        self._evict(keep=path)
                        self._filled = 0
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(lock)

    def forget(self, path: str) -> None:
        """Drop a path this process checked (it was evicted by another process)."""
        self._checked = {k: p for k, p in self._checked.items() if p != path}

    def _find(self, folder: str, key: str) -> str | None:
        """The good entry for `key` (checked in full unless its marker vouches for it), deleting damaged ones."""
        with os.scandir(folder) as it:
            names = [e.name for e in it if e.name.startswith(key) and e.name.endswith(".shard")]
        for name in names:
            path = os.path.join(folder, name)
            parsed = _parse_entry(name)
            try:
                good = _marked(path)
                if not good and parsed is not None and os.path.getsize(path) == parsed[1]:
                    crc, st = _crc_of(path)
                    good = crc == parsed[2] and st.st_size == parsed[1]
                    if good:
                        _mark(path, st)
                st = os.stat(path)
            except FileNotFoundError:  # evicted meanwhile
                continue
            if good:
                with contextlib.suppress(OSError):  # recently used: evicted last (mtime kept)
                    os.utime(path, ns=(time.time_ns(), st.st_mtime_ns))
                return path
            _remove_entry(path)
        return None

    def _fill(self, storage, rel: str, folder: str, key: str) -> str:
        tmp = os.path.join(folder, f".tmp-{key}-{os.getpid()}-{os.urandom(4).hex()}")
        crc, size = 0, 0
        try:
            with open(tmp, "wb") as out, storage.open_stream(rel, FILL_BLOCK) as stream:
                if stream.size > self.spec.max_bytes:
                    raise StorageError(
                        storage.url_of(rel),
                        f"{stream.size} bytes do not fit the local cache (max_bytes {self.spec.max_bytes})",
                    )
                while block := stream.read(FILL_BLOCK):
                    crc = zlib.crc32(block, crc)
                    size += len(block)
                    out.write(block)
            path = os.path.join(folder, _entry_name(key, size, crc))
            os.rename(tmp, path)
            _mark(path, os.stat(path))  # the bytes were checked as they were received
            return path
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def entries(self) -> list[tuple[str, int, float]]:
        """(path, size, last use) of every entry (temporary files of fills abandoned long ago, and markers of
        entries that are gone, are deleted)."""
        out = []
        for folder in os.scandir(self.spec.path):
            if not folder.is_dir():
                continue
            names = set(os.listdir(folder.path))
            for e in os.scandir(folder.path):
                with contextlib.suppress(FileNotFoundError):
                    if _parse_entry(e.name) is not None:
                        st = e.stat()
                        out.append((e.path, st.st_size, st.st_atime))
                    elif e.name.startswith(".tmp-") and time.time() - e.stat().st_mtime > FILL_TIMEOUT:
                        os.unlink(e.path)  # left by a process that died while filling
                    elif e.name.endswith(MARKER) and e.name[: -len(MARKER)] not in names:
                        os.unlink(e.path)
        return out

    def _evict(self, keep: str) -> None:
        entries = sorted(self.entries(), key=lambda t: t[2])
        total = sum(size for _, size, _ in entries)
        for path, size, _ in entries:
            if total <= self.spec.max_bytes:
                return
            if path == keep:
                continue
            _remove_entry(path)
            total -= size


def _abandoned(lock: str) -> bool:
    """A lock whose process on this host is gone, or older than FILL_TIMEOUT."""
    try:
        with open(lock) as f:
            host, _, pid = f.read().partition(" ")
        age = time.time() - os.path.getmtime(lock)
    except (FileNotFoundError, ValueError):
        return False
    if age > FILL_TIMEOUT:
        return True
    if host == socket.gethostname() and pid.isdigit():
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
    return False
