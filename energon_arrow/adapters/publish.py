"""Atomic publication: single files (temp name + rename, or one PUT) and whole folders as one set."""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import ctypes
import ctypes.util
import os
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence

from energon_arrow.adapters.errors import StorageError, TransientError, classify

# objects up to these sizes are written by the lean direct client (one PUT each, adapters.s3direct): bytes in
# memory, and local files (streamed from disk); larger ones by s3fs (multipart above its own threshold)
DIRECT_PUT_LIMIT = 64 << 20
DIRECT_FILE_PUT_LIMIT = 512 << 20
# s3fs's multipart upload reads `max_concurrency` parts into memory at once (by default 10 x 50 MiB: 1.2 GB of RSS
# while a 10M-sample index.sqlite went up); these bound it to about 64 MiB of parts in flight
MULTIPART_PART_SIZE = 16 << 20
MULTIPART_CONCURRENCY = 4
MAX_PARTS = 10_000  # S3's limit on the parts of one upload
STALE_STAGING_S = 24 * 3600  # no publish takes a day: older staging folders were abandoned by a crash
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def write_atomic(storage, rel: str, data: bytes) -> None:
    if not storage.is_local:
        put_objects(storage, {rel: data})
        return
    path = storage.path_of(rel)
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:12]}"
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(os.path.dirname(path) or ".")
    except OSError as exc:
        _silent_remove(tmp)
        raise classify(exc, storage.url_of(rel)) from None


def put_objects(storage, items: Mapping[str, bytes]) -> None:
    """Write whole objects of a remote store (relative path -> content), one PUT each, all at once where the
    direct client serves them. Each object appears whole or not at all; a failed PUT is retried per the
    storage's policy when transient, and the first failure is raised naming its URL."""
    direct = storage._direct
    small = [rel for rel, data in items.items() if direct is not None and len(data) <= DIRECT_PUT_LIMIT]
    if len(small) == 1:
        request = (*storage.path_of(small[0]).split("/", 1), bytes(items[small[0]]))
        storage._call(small[0], lambda: direct.put(*request), "PUT")
    elif small:
        requests = [(*storage.path_of(rel).split("/", 1), bytes(items[rel])) for rel in small]
        for rel, request, result in zip(small, requests, direct.put_many(requests)):
            if result is None:
                continue
            error = classify(result, storage.url_of(rel))
            if not isinstance(error, TransientError):
                raise error from None
            storage._call(rel, lambda request=request: direct.put(*request), "PUT")
    for rel in small:
        storage.fs.invalidate_cache(storage.path_of(rel))  # s3fs's listings cache must not go stale
    sent = set(small)
    rest = [rel for rel in items if rel not in sent]
    if rest:  # through s3fs (concurrently when several), retried as a whole: PUTs of whole objects
        paths = {storage.path_of(rel): items[rel] for rel in rest}
        storage._call(rest[0], lambda: storage.fs.pipe(paths), "PUT")


def publish_folder(
    storage,
    rel_dir: str,
    files: Mapping[str, bytes | os.PathLike],
    keep_existing: bool = True,
    drop: Sequence[str] = (),
    remove_old: bool = True,
) -> str | None:
    """Make `rel_dir` contain `files` (name -> bytes, or a local file to move in).

    Local: the new folder is assembled beside the old one and swapped in with one atomic rename
    (renameat2 RENAME_EXCHANGE where the kernel has it), so readers see the old set or the new set.
    With `keep_existing`, files of the old folder that are not in `files` are carried over (user edits), but for
    the paths in `drop` (relative to `rel_dir`, files or folders). The old set is then deleted, or with
    `remove_old=False` left under its private staging name (no reader sees it; `remove_abandoned` takes it if
    this process dies) and its path returned, for the caller to delete while it goes on (freeing many blocks
    takes milliseconds per file on some disks). Object stores have no multi-object transaction: each file is
    one PUT; all but the mapping's last file are sent concurrently and the last one only after they all
    succeeded, so callers put the file that marks a complete set last.
    """
    for fname in files:
        _check_name(storage, rel_dir, fname)
    if storage.is_local:
        return _publish_local(storage, rel_dir, files, keep_existing, set(drop), remove_old)
    _publish_remote(storage, rel_dir, files, keep_existing)
    return None


def _check_name(storage, rel_dir: str, fname: str) -> None:
    parts = fname.split("/")
    if not fname or fname.startswith("/") or ".." in parts or "" in parts:
        raise StorageError(storage.url_of(rel_dir), f"cannot publish {fname!r}: names must be relative paths")


def _publish_local(storage, rel_dir, files, keep_existing, drop, remove_old):
    target = storage.path_of(rel_dir).rstrip("/")
    parent, name = os.path.split(target)
    staging = os.path.join(parent, private_prefix(f".{name}.staging-") + uuid.uuid4().hex[:12])
    try:
        os.makedirs(parent, exist_ok=True)
        remove_abandoned(parent, f".{name}.staging-")
        if keep_existing and os.path.isdir(target):
            shutil.copytree(
                target,
                staging,
                copy_function=_link_or_copy,
                ignore=lambda d, names: [
                    n
                    for n in names
                    if (d == target and n in files) or os.path.relpath(os.path.join(d, n), target) in drop
                ],
            )
        else:
            os.makedirs(staging)
        for fname, content in files.items():
            dest = os.path.join(staging, fname)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            if os.path.lexists(dest):  # a carried-over hard link: never write through it into the old set
                os.unlink(dest)
            if isinstance(content, (bytes, bytearray, memoryview)):
                with open(dest, "wb") as f:
                    f.write(content)
                    f.flush()
                    os.fsync(f.fileno())
            else:
                shutil.move(os.fspath(content), dest)
        old = _swap_in(staging, target, remove_old)
        _fsync_dir(parent)
        return old
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise classify(exc, storage.url_of(rel_dir)) from None


def private_prefix(prefix: str) -> str:
    """`prefix` followed by this host and process: a folder named so (by a process that could not clean up
    after itself, e.g. SIGKILLed) is recognised as abandoned by `remove_abandoned` once that process is gone."""
    return f"{prefix}{socket.gethostname()}-{os.getpid()}-"


def remove_abandoned(parent: str, prefix: str) -> list[str]:
    """Delete the folders and files `parent/<prefix>*` that their writers abandoned: those named by
    `private_prefix` for a process of this host that no longer runs, and any older than STALE_STAGING_S (another
    host's on a shared filesystem, or unnamed). Returns their names."""
    host, removed = socket.gethostname(), []
    try:
        entries = list(os.scandir(parent))
    except FileNotFoundError:
        return removed
    for entry in entries:
        if not entry.name.startswith(prefix) or entry.is_symlink():
            continue
        owner_host, _, pid = entry.name[len(prefix) :].rpartition("-")[0].rpartition("-")
        try:
            stale = time.time() - entry.stat(follow_symlinks=False).st_mtime > STALE_STAGING_S
        except OSError:
            continue
        if stale or (owner_host == host and pid.isdigit() and not _process_alive(int(pid))):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                _silent_remove(entry.path)
            removed.append(entry.name)
    return removed


def private_temp_path(final: str) -> str:
    """A temporary name beside the local path `final` (`<name>.tmp-<host>-<pid>-<random>`), after removing the
    ones that killed writers of `final` left behind."""
    parent, name = os.path.split(final)
    remove_abandoned(parent or ".", f"{name}.tmp-")
    return os.path.join(parent, private_prefix(f"{name}.tmp-") + uuid.uuid4().hex[:12])


def private_mkdtemp(prefix: str, parent: str | None = None) -> str:
    """`tempfile.mkdtemp` under `parent` (default: the temp folder) with a name `remove_abandoned` recognises,
    after removing the folders of that prefix that killed processes left behind."""
    parent = parent or tempfile.gettempdir()
    remove_abandoned(parent, prefix)
    return tempfile.mkdtemp(prefix=private_prefix(prefix), dir=parent)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        pass
    return True


def _swap_in(staging: str, target: str, remove_old: bool = True) -> str | None:
    """Put `staging` in the place of `target`; the old set is deleted, or its path returned (`remove_old`)."""
    if not os.path.exists(target):
        os.rename(staging, target)
        return None
    if _rename_exchange(staging, target):
        old = staging  # staging now holds the old set
    else:
        old = f"{staging}.old"
        os.rename(target, old)
        os.rename(staging, target)
    if not remove_old:
        return old
    shutil.rmtree(old, ignore_errors=True)
    return None


def _rename_exchange(a: str, b: str) -> bool:
    libc_name = ctypes.util.find_library("c")
    if not libc_name:
        return False
    libc = ctypes.CDLL(libc_name, use_errno=True)
    fn = getattr(libc, "renameat2", None)
    if fn is None:
        return False
    rc = fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    return rc == 0


def _link_or_copy(src, dst):
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _publish_remote(storage, rel_dir, files, keep_existing):
    prefix = rel_dir.rstrip("/")
    for fname, content in files.items():  # check every input before the first write
        if not isinstance(content, (bytes, bytearray, memoryview)):
            _require_local_file(storage, f"{prefix}/{fname}", os.fspath(content))
    items = list(files.items())
    if not items:
        return
    upload = RemoteFolderUpload(storage, rel_dir, workers=max(1, min(8, len(items) - 1)))
    try:
        for fname, content in items[:-1]:
            upload.add(fname, content)
    except BaseException:
        upload.abort()
        raise
    upload.finish(*items[-1])
    if not keep_existing:
        for info in storage.child(prefix).scan("**/*"):
            if info.path not in files:
                storage.remove(f"{prefix}/{info.path}")


class RemoteFolderUpload:
    """An object-store folder written file by file as the files become ready: `add(name, content)` starts the
    upload of one file (bytes, or a local file that is moved in) in the background; `finish(name, content)`
    waits for all of them (raising the first error) and only then writes that last file, the set's marker;
    `abort()` waits for the uploads in flight and drops the rest. Object stores have no multi-object
    transaction: a failure can leave some files of the new set beside the old marker."""

    def __init__(self, storage, rel_dir: str, workers: int = 8):
        self.storage = storage
        self.prefix = rel_dir.rstrip("/")
        self._pool = cf.ThreadPoolExecutor(workers, thread_name_prefix="ea-publish")
        self._sent: list[cf.Future] = []

    def add(self, fname: str, content) -> None:
        _check_name(self.storage, self.prefix, fname)
        self._sent.append(self._pool.submit(self._put, fname, content))

    def finish(self, fname: str, content) -> None:
        _check_name(self.storage, self.prefix, fname)
        try:
            for fut in self._sent:
                fut.result()
        finally:
            self.abort()
        self._put(fname, content)

    def abort(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _put(self, fname: str, content) -> None:
        storage = self.storage
        rel = f"{self.prefix}/{fname}"
        if isinstance(content, (bytes, bytearray, memoryview)):
            write_atomic(storage, rel, bytes(content))
            return
        local = os.fspath(content)
        _require_local_file(storage, rel, local)
        direct = storage._direct
        if direct is not None and os.path.getsize(local) <= DIRECT_FILE_PUT_LIMIT:
            storage._call(rel, lambda: direct.put_file(*storage.path_of(rel).split("/", 1), local), "PUT")
            storage.fs.invalidate_cache(storage.path_of(rel))
        else:
            # streamed (on S3 multipart, MULTIPART_CONCURRENCY parts in memory at a time); the object appears
            # whole when the upload completes
            parts = {}
            if storage.protocol == "s3":
                size = max(MULTIPART_PART_SIZE, -(-os.path.getsize(local) // MAX_PARTS))
                parts = {"chunksize": size, "max_concurrency": MULTIPART_CONCURRENCY}
            storage._call(rel, lambda: storage.fs.put_file(local, storage.path_of(rel), **parts), "PUT")
        _silent_remove(local)  # moved in, as on local disk


def _require_local_file(storage, rel: str, local: str) -> None:
    """The local file to be published as `rel` exists (else a NotFound naming both)."""
    if not os.path.isfile(local):
        missing = FileNotFoundError(f"no local file {local!r} to publish as {rel!r}")
        raise classify(missing, storage.url_of(rel))


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _silent_remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)
