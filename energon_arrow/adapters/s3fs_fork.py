"""s3fs filesystems inherited by a forked child are not closed there.

s3fs closes a filesystem's aiohttp session from a `weakref.finalize` that runs the close on the filesystem's
event loop. In a forked child that loop's thread does not exist: every inherited filesystem the child's garbage
collector reaches waits out fsspec's one-second poll (a DataLoader worker forked after the training process
touched S3, and energon's workers call `gc.collect()`, stalled a second per filesystem), and the close would act on
connections the parent still uses. After a fork the child detaches those finalizers; the inherited sockets close
when the child exits. The table of live finalizers is CPython's `weakref.finalize._registry`; where it is missing,
nothing is detached (the stall comes back, nothing breaks).
"""

from __future__ import annotations

import os
import sys
import weakref


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


os.register_at_fork(after_in_child=detach_inherited_s3fs_finalizers)
