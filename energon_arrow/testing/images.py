"""Generate WebDataset shards of real JPEG images (Pillow) with captions, for image loader tests and benchmarks.

Images are smooth random colour fields (a small random image scaled up), so they compress like photos rather than
noise. `size` is a fixed (height, width) or a (low, high) range of side lengths drawn per image.
"""

from __future__ import annotations

import io
import tarfile

import numpy as np

from energon_arrow.adapters import open_storage


def jpeg_bytes(
    rng: np.random.Generator, height: int, width: int, quality: int = 90, mode: str = "RGB"
) -> bytes:
    from PIL import Image

    small = rng.integers(0, 256, (max(2, height // 16), max(2, width // 16), 3), dtype=np.uint8)
    img = Image.fromarray(small).resize((width, height), Image.Resampling.BICUBIC)
    if mode != "RGB":
        img = img.convert(mode)
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def image_shard(
    shard: int,
    samples: int,
    size: tuple[int, int] = (384, 384),
    varied: bool = False,
    quality: int = 90,
    seed: int = 0,
) -> bytes:
    """One tar shard of `samples` keyed `{shard:06d}_{i:06d}` with parts jpg and txt. `varied`: `size` is a
    (low, high) range of side lengths, drawn per image and side."""
    rng = np.random.default_rng(seed * 1_000_003 + shard)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(samples):
            h, w = rng.integers(size[0], size[1] + 1, 2).tolist() if varied else size
            key = f"{shard:06d}_{i:06d}"
            parts = {"jpg": jpeg_bytes(rng, h, w, quality), "txt": f"image {i} of shard {shard}".encode()}
            for ext, payload in parts.items():
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(payload)
                info.mtime = 1_700_000_000
                tar.addfile(info, io.BytesIO(payload))
    return buf.getvalue()


def write_image_webdataset(
    root: str,
    shards: int,
    samples_per_shard: int,
    size: tuple[int, int] = (384, 384),
    varied: bool = False,
    quality: int = 90,
    seed: int = 0,
) -> list[str]:
    """Write `shards` tar files of JPEG samples under `root/shards`; returns their relative paths."""
    storage = open_storage(root)
    storage.makedirs("shards")
    names = []
    for s in range(shards):
        rel = f"shards/shard-{s:06d}.tar"
        storage.write_atomic(rel, image_shard(s, samples_per_shard, size, varied, quality, seed))
        names.append(rel)
    return names
