"""Finding a dataset's tar shards the way `energon prepare` does.

`discover_shards(storage, exclude=None) -> (list[FileInfo], {path: size})`: every `*.tar` and `*.tgz` below the
root that energon's globs `**/*.tar` and `**/*.tgz` find (recursive; not hidden files, nor files in hidden
folders; `.tgz` shards are then refused as gzip-compressed), ordered like energon's `sorted(Path)`
(component-wise), minus those whose relative path `re.search`es `exclude`. Shard paths are relative POSIX paths.
"""

from __future__ import annotations

import re

from energon_arrow.adapters import FileInfo
from energon_arrow.adapters.urls import glob_to_regex
from energon_arrow.meta.errors import MetaError


def shard_sort_key(path: str) -> tuple[str, ...]:
    return tuple(path.split("/"))


def compile_exclude(exclude: str | None) -> re.Pattern | None:
    if not exclude:
        return None
    try:
        return re.compile(exclude)
    except re.error as exc:
        raise MetaError(f"--exclude {exclude!r}: invalid regex at position {exc.pos}: {exc.msg}") from None


def discover_shards(storage, exclude: str | None = None) -> tuple[list[FileInfo], dict[str, int]]:
    """(shards, {path: size} of every file) — the second lets callers check existing `.tar.idx` files cheaply."""
    pattern = compile_exclude(exclude)
    files = storage.scan("**/*")
    visible = glob_to_regex("**/*", hidden=False)  # what energon's globs see: no hidden name on the way
    shards = [
        f
        for f in files
        if f.path.endswith((".tar", ".tgz"))
        and visible.match(f.path)
        and not (pattern and pattern.search(f.path))
    ]
    shards.sort(key=lambda f: shard_sort_key(f.path))
    return shards, {f.path: f.size for f in files}
