"""Handing fetched windows from one DataLoader worker to the others on the node, through files in shared memory.

The workers of one loader plan the same windows (remote_plan.plan_group), and each window is fetched by one of
them. That worker writes the bytes to a file under a temporary name in a folder of /dev/shm, then gives every
other worker that reads the window its own hard link, `<window>.<worker>`, and removes the temporary name: a link
appears complete or not at all. A reader opens its link, maps it (zero copy, read-only) and removes the link at
once, so the memory goes back to the system when the last reader drops its mapping; nothing needs a reference
count. A link of size 0 means the fetcher did not write the window (it would have left less than half of the
shared memory free, or the write failed): the reader fetches it itself. A reader that does not see its link within `wait_s` fetches the window itself too, and stops waiting for
links from then on (the workers evidently do not share a folder, e.g. not forked by one loader): sharing saves
bytes and requests, it never decides what is read.

The folder is named by the loader's process, the DataLoader iterator's base seed and the dataset; every worker
removes its own unread links when it stops and the last one removes the folder. Folders of loader processes that
no longer exist (killed runs) are removed when a new one is made.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import shutil
import time

SHM_ROOT = "/dev/shm"
PREFIX = "ea-windows-"


class WindowShare:
    def __init__(self, folder: str, worker: int, workers: int, wait_s: float = 20.0):
        self.folder, self.worker, self.workers, self.wait_s = folder, worker, workers, wait_s
        self.waiting = True  # False once a link did not come in time: fetch everything from then on
        os.makedirs(folder, exist_ok=True)

    @classmethod
    def for_worker(cls, tag: str, worker: int, workers: int, root: str = SHM_ROOT) -> WindowShare | None:
        """The share of the loader named `tag` (its pid first), or None where shared memory is not usable."""
        if workers < 2 or not os.path.isdir(root) or not os.access(root, os.W_OK):
            return None
        _remove_stale(root)
        try:
            return cls(os.path.join(root, PREFIX + tag), worker, workers)
        except OSError:
            return None

    def publish(self, name: str, data, readers: list[int]) -> None:
        """Give the window's bytes to the workers `readers` (a failed write gives them empty links)."""
        readers = [r for r in readers if r != self.worker]
        if not readers:
            return
        tmp = os.path.join(self.folder, f"{name}.tmp{self.worker}")
        try:
            _write_file(tmp, data if self._room(len(data)) else b"")
        except OSError as exc:
            if exc.errno == errno.ENOENT:  # the folder is gone: every reader has stopped
                return
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            with contextlib.suppress(OSError):
                _write_file(tmp, b"")
        try:
            for r in readers:
                with contextlib.suppress(FileExistsError):
                    os.link(tmp, self._link(name, r))
        except FileNotFoundError:
            return
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    def _room(self, size: int) -> bool:
        """Whether `size` more bytes leave at least half of the shared-memory file system free (the DataLoader
        passes tensors through it too; a small /dev/shm, such as a container's default 64 MB, must not fill)."""
        try:
            st = os.statvfs(self.folder)
        except OSError:
            return False
        return (st.f_bavail * st.f_frsize - size) * 2 >= st.f_blocks * st.f_frsize

    def take(self, name: str, size: int) -> mmap.mmap | None:
        """This worker's link of window `name` as a read-only mapping, waiting for it up to `wait_s`; None when
        it must be fetched here (the fetcher could not share it, or it did not come)."""
        if not self.waiting:
            return None
        path = self._link(name, self.worker)
        deadline, pause = time.monotonic() + self.wait_s, 0.0002
        while True:
            try:
                fd = os.open(path, os.O_RDONLY)
                break
            except FileNotFoundError:
                if time.monotonic() > deadline:
                    self.waiting = False
                    return None
                time.sleep(pause)
                pause = min(pause * 2, 0.005)
        try:
            os.unlink(path)
            got = os.fstat(fd).st_size
            if got != size or size == 0:
                return None
            return mmap.mmap(fd, size, prot=mmap.PROT_READ)
        finally:
            os.close(fd)

    def close(self) -> None:
        """Remove this worker's unread links; the last worker to stop removes the folder."""
        suffix = f".{self.worker}"
        with contextlib.suppress(OSError):
            for entry in os.scandir(self.folder):
                if entry.name.endswith(suffix):
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)
            open(os.path.join(self.folder, f"stopped{suffix}"), "wb").close()
            stopped = [e for e in os.listdir(self.folder) if e.startswith("stopped.")]
            if len(stopped) >= self.workers:
                shutil.rmtree(self.folder, ignore_errors=True)

    def _link(self, name: str, worker: int) -> str:
        return os.path.join(self.folder, f"{name}.{worker}")


def _write_file(path: str, data) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        view = memoryview(data).cast("B")
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _remove_stale(root: str) -> None:
    """Remove the folders of loader processes that have exited."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(root):
            if not entry.name.startswith(PREFIX):
                continue
            pid = entry.name[len(PREFIX) :].split("-", 1)[0]
            if pid.isdigit() and not _alive(int(pid)):
                shutil.rmtree(entry.path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
