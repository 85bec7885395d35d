"""ShardFiles: descriptors belong to the process that opened them (a forked child or an unpickled copy opens
its own)."""

from __future__ import annotations

import os
import pickle

from energon_arrow.loader.shard_files import ShardFiles


def test_descriptors_are_reopened_after_fork_and_unpickling(tmp_path):
    path = tmp_path / "shard.tar"
    path.write_bytes(b"0123456789")
    files = ShardFiles()
    fd = files.fd(str(path))
    assert files.fd(str(path)) == fd and os.pread(fd, 4, 2) == b"2345"

    copy = pickle.loads(pickle.dumps(files))
    assert copy.max_fds == files.max_fds and copy.fd(str(path)) != fd  # its own descriptor, not the number
    copy.close()

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child still holds the parent's descriptor: a new one gets another number
        try:
            os.write(w, str(files.fd(str(path))).encode())
        finally:
            os._exit(0)
    os.close(w)
    child_fd = int(os.read(r, 32))
    os.waitpid(pid, 0)
    os.close(r)
    assert child_fd != fd and files.fd(str(path)) == fd
    files.close()
