"""Where Nanoset indices come from: a node-local cache keyed by everything that changes them, and, under
torch.distributed, one builder whose arrays reach the other ranks by broadcast (no shared filesystem needed).

A cache entry is the folder `{cache_dir}/{config_key}-{files_key}/` holding one `.npy` per array plus
`description.json`; it is published atomically (written under a temporary folder name, then renamed). `config_key`
hashes the settings (paths, split, sample counts, sequence length, seed, add-extra-token, ...); `files_key` hashes
the identity (size + ETag/mtime) of every .bin/.idx involved. An entry for the same settings with other file
identities means a token file changed after its indices were built: that is an error unless rebuilding is allowed.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
from collections.abc import Callable

import numpy as np

from energon_arrow.adapters.publish import private_temp_path

FORMAT_VERSION = 1
_BROADCAST_CHUNK = 64 << 20


class StaleCacheError(RuntimeError):
    """A token file changed after the indices cached for the same settings were built."""


def default_cache_dir() -> str:
    """Node-local default: $ENERGON_ARROW_CACHE/nanoset, else ~/.cache/energon-arrow/nanoset."""
    root = os.environ.get("ENERGON_ARROW_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "energon-arrow"
    )
    return os.path.join(root, "nanoset")


def digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:32]


class IndexCache:
    """Index arrays stored as .npy files under one folder per key."""

    def __init__(self, cache_dir: str | os.PathLike | None):
        self.dir = os.fspath(cache_dir) if cache_dir is not None else default_cache_dir()

    def entry(self, config_key: str, files_key: str) -> str:
        return f"{config_key}-{files_key}"

    def load(self, name: str) -> dict[str, np.ndarray] | None:
        folder = os.path.join(self.dir, name)
        desc_path = os.path.join(folder, "description.json")
        if not os.path.isfile(desc_path):
            return None
        with open(desc_path) as f:
            desc = json.load(f)
        return {a: np.load(os.path.join(folder, f"{a}.npy"), mmap_mode="r") for a in desc["arrays"]}

    def check_fresh(self, config_key: str, files_key: str, files: dict, allow_rebuild: bool) -> None:
        """Raise StaleCacheError when indices for these settings exist for other token-file identities."""
        if allow_rebuild:
            return
        for folder in sorted(glob.glob(os.path.join(glob.escape(self.dir), f"{config_key}-*"))):
            if os.path.basename(folder) == self.entry(config_key, files_key):
                continue
            try:
                with open(os.path.join(folder, "description.json")) as f:
                    old = json.load(f).get("files", {})
            except (OSError, ValueError):
                continue
            changed = [url for url, ident in files.items() if old.get(url) not in (None, ident)]
            if changed:
                url = changed[0]
                raise StaleCacheError(
                    f"{url} changed after the Nanoset indices in {folder} were built "
                    f"(identity was {old[url]}, now {files[url]}); pass allow_rebuild_on_change=True "
                    f"(NanosetConfig) to build new indices, or delete that folder"
                )

    def store(self, name: str, arrays: dict[str, np.ndarray], description: dict) -> None:
        """Write the entry under a temporary folder name and rename it into place. The same name means the same
        settings and file identities, hence the same arrays: an entry that already exists (a racing rank on
        this node) is kept as it is."""
        target = os.path.join(self.dir, name)
        staging = None
        try:
            os.makedirs(self.dir, exist_ok=True)
            staging = private_temp_path(target)  # (and the staging folders of killed builds removed)
            os.makedirs(staging)
            for a, arr in arrays.items():
                np.save(os.path.join(staging, f"{a}.npy"), arr, allow_pickle=False)
            desc = dict(description, arrays=list(arrays), format=FORMAT_VERSION)
            with open(os.path.join(staging, "description.json"), "w") as f:
                json.dump(desc, f, indent=2, sort_keys=True, default=str)
            try:
                os.rename(staging, target)
            except OSError:
                if not os.path.isfile(os.path.join(target, "description.json")):
                    raise
        except OSError as exc:
            raise OSError(f"cannot write the Nanoset index cache {target}: {exc}") from exc
        finally:
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)


def _distributed():
    """torch.distributed when initialised with more than one rank, else None (torch imported lazily)."""
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if not dist.is_available() or not dist.is_initialized() or dist.get_world_size() < 2:
        return None
    return dist


def obtain(
    cache: IndexCache,
    config_key: str,
    files: dict,
    description: dict,
    build: Callable[[], dict[str, np.ndarray]],
    allow_rebuild: bool,
) -> dict[str, np.ndarray]:
    """The arrays for these settings: from the local cache, else built (by rank 0 under torch.distributed and
    broadcast to the ranks that lack them); every rank that lacked them stores them in its node-local cache."""
    files_key = digest(files)
    name = cache.entry(config_key, files_key)
    desc = dict(description, files=files, config_key=config_key)
    dist = _distributed()

    def build_and_store() -> dict[str, np.ndarray]:
        cache.check_fresh(config_key, files_key, files, allow_rebuild)
        arrays = build()
        cache.store(name, arrays, desc)
        return arrays

    if dist is None:
        local = cache.load(name)
        return local if local is not None else build_and_store()

    rank, world = dist.get_rank(), dist.get_world_size()
    # gloo for the objects and arrays (under NCCL, a gloo group; torch destroys it with the default group)
    group = None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")
    local = cache.load(name)
    gathered: list = [None] * world  # (index key, has it cached) of every rank
    dist.all_gather_object(gathered, (name, local is not None), group=group)
    names = [n for n, _ in gathered]
    if len(set(names)) != 1:
        odd = next(r for r, n in enumerate(names) if n != names[0])
        raise RuntimeError(
            f"ranks disagree on the Nanoset index key: rank 0 has {names[0]}, rank {odd} has {names[odd]} "
            f"(different settings or different token files); this is rank {rank}"
        )
    if all(has for _, has in gathered):
        return local
    status = [None]
    arrays = None
    if rank == 0:
        try:
            arrays = local if local is not None else build_and_store()
        except Exception as exc:
            status = [f"{type(exc).__name__}: {exc}"]
            dist.broadcast_object_list(status, src=0, group=group)
            raise
    dist.broadcast_object_list(status, src=0, group=group)
    if status[0] is not None:
        raise RuntimeError(f"rank 0 failed to build the Nanoset indices: {status[0]}")
    received = _broadcast_arrays(dist, group, arrays if rank == 0 else None)
    if local is not None:
        return local
    if rank != 0:
        cache.store(name, received, desc)
    return received


def _broadcast_arrays(dist, group, arrays: dict[str, np.ndarray] | None) -> dict[str, np.ndarray]:
    """Rank 0's arrays on every rank, sent as raw bytes in bounded chunks."""
    import torch

    meta = [None if arrays is None else [(k, v.dtype.str, tuple(v.shape)) for k, v in arrays.items()]]
    dist.broadcast_object_list(meta, src=0, group=group)
    out: dict[str, np.ndarray] = {}
    for key, dtype, shape in meta[0]:
        if arrays is not None:
            flat = np.ascontiguousarray(arrays[key]).reshape(-1).view(np.uint8)
        else:
            flat = np.empty(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize, np.uint8)
        for a in range(0, flat.size, _BROADCAST_CHUNK):
            piece = flat[a : a + _BROADCAST_CHUNK]
            t = torch.from_numpy(np.array(piece) if arrays is not None else piece)
            dist.broadcast(t, src=0, group=group)
        out[key] = arrays[key] if arrays is not None else flat.view(np.dtype(dtype)).reshape(shape)
    return out
