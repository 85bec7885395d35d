"""Generate WebDataset shards of real JPEG images (Pillow) with captions, for image loader tests and benchmarks.

Images are smooth random colour fields (a small random image scaled up), so they compress like photos rather than
noise. `size` is a fixed (height, width) or a (low, high) range of side lengths drawn per image.
"""

from __future__ import annotations

import io

import numpy as np

from energon_arrow.testing.synthetic import tar_of_samples, write_shards


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

    def sample(i: int) -> tuple[str, dict[str, bytes]]:
        h, w = rng.integers(size[0], size[1] + 1, 2).tolist() if varied else size
        return f"{shard:06d}_{i:06d}", {
            "jpg": jpeg_bytes(rng, h, w, quality),
            "txt": f"image {i} of shard {shard}".encode(),
        }

    return tar_of_samples(sample(i) for i in range(samples))


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
    return write_shards(
        root, shards, lambda s: image_shard(s, samples_per_shard, size, varied, quality, seed)
    )
