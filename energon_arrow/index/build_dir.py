"""Private build folders of prepare: the new `.nv-meta` is assembled in one before it is published.

`build_dir(storage, tmp_path)`: beside the dataset for local roots (same filesystem, so the publish is a rename),
else in `tmp_path` or the system temp folder; named after this host and process so that a later prepare can tell
an abandoned one (its process is gone) and remove it (`remove_abandoned_builds`).
"""

from __future__ import annotations

import os
import tempfile

from energon_arrow.adapters.publish import private_prefix, remove_abandoned

_BUILD_PREFIX = ".nv-meta.build-"


_TMP_BUILD_PREFIX = "energon-arrow-prepare-"


def build_dir(storage, tmp_path: str | None) -> str:
    """A new private build folder (module docstring), after removing the abandoned ones there."""
    if tmp_path or not storage.is_local:
        parent = tmp_path or tempfile.gettempdir()
        os.makedirs(parent, exist_ok=True)
        remove_abandoned(parent, _TMP_BUILD_PREFIX)
        return tempfile.mkdtemp(prefix=private_prefix(_TMP_BUILD_PREFIX), dir=parent)
    root = storage.local_path("")
    os.makedirs(root, exist_ok=True)
    remove_abandoned_builds(root)
    return tempfile.mkdtemp(prefix=private_prefix(_BUILD_PREFIX), dir=root)


def remove_abandoned_builds(root: str) -> list[str]:
    """Delete the build folders of prepares that were killed (SIGKILL cannot clean up). Returns their names."""
    return remove_abandoned(root, _BUILD_PREFIX)
