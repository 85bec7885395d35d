"""Open read-only descriptors of local shard files, per process (a forked worker opens its own), at most
`max_fds` at a time (the oldest is closed first)."""

from __future__ import annotations

import os

_forks = [0]  # bumped in every forked child: a cheaper test than os.getpid() on each read
os.register_at_fork(after_in_child=lambda: _forks.__setitem__(0, _forks[0] + 1))


class ShardFiles:
    def __init__(self, max_fds: int = 128):
        self.max_fds = max_fds
        self._fds: dict[str, int] = {}
        self._pid = os.getpid()
        self._fork = _forks[0]

    def fd(self, path: str) -> int:
        """The descriptor of `path` (OSError when it cannot be opened)."""
        if self._fork != _forks[0]:  # forked: the parent's descriptors share its file offsets; open our own
            self._fds, self._pid, self._fork = {}, os.getpid(), _forks[0]
        fd = self._fds.get(path)
        if fd is None:
            if len(self._fds) >= self.max_fds:
                os.close(self._fds.pop(next(iter(self._fds))))
            fd = self._fds[path] = os.open(path, os.O_RDONLY)
        return fd

    def forget(self, path: str) -> None:
        """Close the descriptor of `path` if one is open (the file is opened again on its next use)."""
        fd = self._fds.pop(path, None) if self._fork == _forks[0] else None
        if fd is not None:
            os.close(fd)

    def __getstate__(self) -> dict:  # descriptors are this process's: another process opens its own
        return {"max_fds": self.max_fds}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["max_fds"])

    def close(self) -> None:
        """Close this process's descriptors (those inherited from a parent are left to it)."""
        if self._pid == os.getpid():
            for fd in self._fds.values():
                os.close(fd)
        self._fds = {}
