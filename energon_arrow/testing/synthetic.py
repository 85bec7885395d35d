"""Generate WebDataset tar shards with realistic parts (binary jpg stand-in, txt caption, small json)."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Callable, Iterable

import numpy as np

from energon_arrow.adapters import Storage, open_storage


def tar_of_samples(samples: Iterable[tuple[str, dict[str, bytes]]]) -> bytes:
    """A USTAR tar of `(key, {ext: payload})` samples, members `key.ext` in the given order (fixed mtime)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for key, parts in samples:
            for ext, payload in parts.items():
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(payload)
                info.mtime = 1_700_000_000
                tar.addfile(info, io.BytesIO(payload))
    return buf.getvalue()


def write_shards(
    root: str | Storage,
    shards: int,
    shard_bytes_of: Callable[[int], bytes],
    storage_options: dict | None = None,
    subdir: str = "shards",
) -> list[str]:
    """Write `shards` tar files `root/subdir/shard-NNNNNN.tar` (atomically, bytes from `shard_bytes_of(i)`);
    returns their relative paths in sorted order."""
    storage = open_storage(root, storage_options)
    storage.makedirs(subdir)
    names = []
    for s in range(shards):
        rel = f"{subdir}/shard-{s:06d}.tar"
        storage.write_atomic(rel, shard_bytes_of(s))
        names.append(rel)
    return names


def shard_bytes(
    shard: int, samples: int, image_bytes: int = 2048, seed: int = 0, key_prefix: str = ""
) -> bytes:
    """One tar shard: samples keyed `{key_prefix}{shard:06d}_{i:06d}` with parts jpg, txt, json."""
    rng = np.random.default_rng(seed * 1_000_003 + shard)

    def sample(i: int) -> tuple[str, dict[str, bytes]]:
        caption = f"sample {i} of shard {shard}: a photo of thing {int(rng.integers(1000))}"
        return f"{key_prefix}{shard:06d}_{i:06d}", {
            "jpg": rng.bytes(image_bytes),
            "txt": caption.encode(),
            "json": json.dumps({"caption": caption, "label": int(i % 10), "shard": shard}).encode(),
        }

    return tar_of_samples(sample(i) for i in range(samples))


def write_webdataset(
    root: str | Storage,
    shards: int = 4,
    samples_per_shard: int = 100,
    image_bytes: int = 2048,
    storage_options: dict | None = None,
    subdir: str = "shards",
    seed: int = 0,
) -> list[str]:
    """Write `shards` tar files under `root/subdir`; returns their relative paths in sorted order."""
    return write_shards(
        root, shards, lambda s: shard_bytes(s, samples_per_shard, image_bytes, seed), storage_options, subdir
    )
