"""WebDataset shards with decodable parts (small real JPEGs, JSON, captions) and chosen broken samples, for lint,
preview and the lint benchmark."""

from __future__ import annotations

import io
import json

import numpy as np

from energon_arrow.testing.synthetic import tar_of_samples, write_shards

# what a broken part looks like: a JPEG cut short after its header, JSON with a syntax error
BROKEN = {
    "jpg": lambda good: good[: min(len(good) // 3, 200)],
    "json": lambda good: b'{"caption": "unterminated',
}


def jpeg_pool(count: int = 16, size: int = 48, seed: int = 0) -> list[bytes]:
    """`count` distinct small JPEGs (smooth gradients plus noise, about 1-2 KB each)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size]
    out = []
    for i in range(count):
        base = np.stack([xx * (i + 1), yy * (i + 2), (xx + yy) * 3], axis=-1) % 256
        pixels = np.clip(base + rng.integers(-24, 24, base.shape), 0, 255).astype(np.uint8)
        buf = io.BytesIO()
        Image.fromarray(pixels, "RGB").save(buf, format="JPEG", quality=80)
        out.append(buf.getvalue())
    return out


def lint_shard_bytes(
    shard: int, samples: int, images: list[bytes], broken: dict[tuple[int, int], str]
) -> bytes:
    """One tar shard: samples `{shard:06d}_{i:06d}` with jpg, txt and json; `broken[(shard, i)]` names a part
    ("jpg" or "json") to write broken."""

    def sample(i: int) -> tuple[str, dict[str, bytes]]:
        caption = f"sample {i} of shard {shard}"
        parts = {
            "jpg": images[(shard * samples + i) % len(images)],
            "txt": caption.encode(),
            "json": json.dumps({"caption": caption, "label": i % 10}).encode(),
        }
        bad = broken.get((shard, i))
        if bad is not None:
            parts[bad] = BROKEN[bad](parts[bad])
        return f"{shard:06d}_{i:06d}", parts

    return tar_of_samples(sample(i) for i in range(samples))


def write_lint_webdataset(
    root: str,
    shards: int = 2,
    samples_per_shard: int = 10,
    broken: dict[tuple[int, int], str] | None = None,
    storage_options: dict | None = None,
) -> list[str]:
    """Write `shards` tar files under `root/shards`; returns their relative paths."""
    images = jpeg_pool()
    return write_shards(
        root, shards, lambda s: lint_shard_bytes(s, samples_per_shard, images, broken or {}), storage_options
    )
