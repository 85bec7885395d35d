"""Library state that a forked child (a DataLoader worker) must not use as inherited: repaired after every fork.

- s3fs filesystems: s3fs closes a filesystem's aiohttp session from a `weakref.finalize` that runs the close on the
  filesystem's event loop. In a forked child that loop's thread does not exist: every inherited filesystem the
  child's garbage collector reaches waits out fsspec's one-second poll (a DataLoader worker forked after the
  training process touched S3, and energon's workers call `gc.collect()`, stalled a second per filesystem), and the
  close would act on connections the parent still uses. The child detaches those finalizers; the inherited sockets
  close when the child exits. The table of live finalizers is CPython's `weakref.finalize._registry`; where it is
  missing, nothing is detached (the stall comes back, nothing breaks).
- multi-storage-client's fsspec filesystem (msc:// profiles read through it) runs every call on one module-level
  thread pool. Once the parent has used it, a child inherits the pool object with its threads recorded but not
  running, so every call of the child waits forever (a worker reading an msc:// dataset after the training process
  read any msc:// path hung). The child gets a new pool of the same size.
"""

from __future__ import annotations

import os
import sys
import weakref
from concurrent.futures import ThreadPoolExecutor


def detach_inherited_s3fs_finalizers() -> int:
    """Detach this process's pending s3fs session closes; returns how many."""
    core = sys.modules.get("s3fs.core")
    registry = getattr(weakref.finalize, "_registry", None)
    if core is None or not registry:
        return 0
    close = core.S3FileSystem.close_session
    inherited = [f for f, info in list(registry.items()) if getattr(info, "func", None) is close]
    for f in inherited:
        f.detach()
    return len(inherited)


def renew_msc_thread_pool() -> bool:
    """Give multi-storage-client's fsspec layer a new thread pool if it has one (returns whether it had)."""
    module = sys.modules.get("multistorageclient.contrib.async_fs")
    inherited = getattr(module, "_GLOBAL_THREAD_POOL", None)
    if not isinstance(inherited, ThreadPoolExecutor):
        return False
    module._GLOBAL_THREAD_POOL = ThreadPoolExecutor(max_workers=inherited._max_workers)
    return True


def _after_fork_in_child() -> None:
    detach_inherited_s3fs_finalizers()
    renew_msc_thread_pool()


os.register_at_fork(after_in_child=_after_fork_in_child)
