"""Image loader benchmarks, side by side with megatron-energon 7.4.1 on the same prepared datasets (issue 14).

Data (generated with Pillow, prepared with `energon prepare` once under `$EA_BENCH_DIR`, default
/tmp/ea-bench-images): 16 shards x 500 JPEGs of 384x384 at quality 90, and a varied set of side lengths 64-1024
(8 shards x 250). Full epochs, batch 32, 2 workers, samples/s (medians of alternating repeats):
- energon's default task encoder (images decoded to float CHW in [0, 1]) vs ours, identical images per key;
- our uint8 mode (`SampleDecoder(image_decode="torchrgb8")`) vs the decode limit;
- a target size of 224 on the varied set (`SampleDecoder(image_size=224)`, float CHW) vs energon running the
  same resize + center crop in `encode_sample` on PIL images;
- the decode limit: workers x one core's Pillow decode rate on the same files (open + load + RGB + numpy array),
  measured with WORKERS processes decoding their shares at the same time (same machine load as the loader).
The GPU section (nvjpeg decode, the loader with `image_device_decode=True`, host-to-device) is its own benchmark:
`python -m benchmarks.run images_gpu` (benchmarks/bench_images_gpu.py).
--quick shrinks the datasets (sanity runs only). The medians are also drawn as bars next to the decode limit in
benchmarks/results/images.svg (for docs/benchmarks.md).
"""

from __future__ import annotations

import io
import os
import tarfile
import time

from benchmarks.harness import RESULTS_DIR, Comparison, alternate

BATCH, WORKERS, TARGET = 32, 2, 224


def _prepared(
    root: str, shards: int, per_shard: int, size: tuple[int, int], varied: bool, by_energon: bool = True
) -> str:
    """The image dataset under `root`, written and prepared once: by `energon prepare` (then our side index is
    built from its index.sqlite outside the timing), or by energon-arrow's prepare where energon is not
    installed (the GPU section alone)."""
    if os.path.exists(os.path.join(root, ".nv-meta", "index.sqlite")):
        return root
    import shutil

    from energon_arrow.query import open_dataset
    from energon_arrow.testing.images import write_image_webdataset

    shutil.rmtree(root, ignore_errors=True)
    write_image_webdataset(root, shards, per_shard, size=size, varied=varied, quality=90)
    if by_energon:
        from energon_arrow.testing.reference import energon_prepare

        energon_prepare(root, split_ratio="1,0,0")
    else:
        from energon_arrow.index.prepare import PrepareOptions, prepare_dataset
        from energon_arrow.meta import field_map_dataset, parse_split_ratio

        dataset_yaml = field_map_dataset("CaptioningSample", {"image": "jpg", "caption": "txt"})
        prepare_dataset(
            root, PrepareOptions(split_ratio=parse_split_ratio("1,0,0"), dataset_yaml=dataset_yaml)
        )
    open_dataset(root, publish=True).close()  # our side index, built once outside the timing
    return root


def fixed_dataset(quick: bool, by_energon: bool = True) -> tuple[str, int, int]:
    """(root, shards, samples per shard) of the 384x384 set."""
    base = os.environ.get("EA_BENCH_DIR", "/tmp/ea-bench-images")
    shards, per_shard = (4, 100) if quick else (16, 500)
    root = _prepared(f"{base}/fixed-{shards}x{per_shard}", shards, per_shard, (384, 384), False, by_energon)
    return root, shards, per_shard


def _resize_encoder(api):
    """energon's way to a target size: the decoder gives PIL images, encode_sample scales the shorter side to
    224 (bilinear), center-crops 224 x 224 and makes a float CHW tensor in [0, 1]."""
    import numpy as np
    import torch
    from PIL import Image

    class Resize(api.DefaultTaskEncoder):
        decoder = api.SampleDecoder(image_decode="pil")

        def encode_sample(self, sample):
            img = sample.image
            w, h = img.size
            scale = TARGET / min(w, h)
            img = img.resize((max(TARGET, round(w * scale)), max(TARGET, round(h * scale))), Image.BILINEAR)
            left, top = (img.size[0] - TARGET) // 2, (img.size[1] - TARGET) // 2
            img = img.crop((left, top, left + TARGET, top + TARGET))
            arr = np.asarray(img, dtype=np.float32) / np.float32(255)
            sample.image = torch.from_numpy(arr.transpose(2, 0, 1).copy())
            return sample

    return Resize()


def _epoch(api, root: str, te=None) -> float:
    if te is None:

        class Default(api.DefaultTaskEncoder):
            pass

        te = Default()
    ds = api.get_train_dataset(
        root,
        worker_config=api.WorkerConfig(rank=0, world_size=1, num_workers=WORKERS),
        batch_size=BATCH,
        shuffle_buffer_size=100,
        max_samples_per_sequence=100,
        task_encoder=te,
        repeat=False,
    )
    t0 = time.perf_counter()
    n = sum(len(b.__key__) for b in api.get_loader(ds))
    return n / (time.perf_counter() - t0)


def _ours(root: str, **decoder) -> float:
    import energon_arrow as ea

    te = ea.DefaultTaskEncoder()
    if decoder:
        te.decoder = ea.SampleDecoder(**decoder)
    return _epoch(ea, root, te)


def _energon(root: str, te_factory=None) -> float:
    import megatron.energon as me

    return _epoch(me, root, te_factory(me) if te_factory else None)


def _payloads(root: str, limit: int) -> list[bytes]:
    out = []
    shards = sorted(f for f in os.listdir(os.path.join(root, "shards")) if f.endswith(".tar"))
    for name in shards:
        with tarfile.open(os.path.join(root, "shards", name)) as tar:
            for m in tar:
                if m.name.endswith(".jpg"):
                    out.append(tar.extractfile(m).read())
                    if len(out) == limit:
                        return out
    return out


def benchmark_payloads(root: str, quick: bool) -> list[bytes]:
    return _payloads(root, 500 if quick else 2000)


def _decode_share(payloads: list[bytes]) -> float:
    """One core's work: every payload decoded with Pillow to an RGB numpy array (open + load + convert when not
    RGB + array); returns the seconds it took."""
    import numpy as np
    from PIL import Image

    t0 = time.perf_counter()
    for data in payloads:
        with Image.open(io.BytesIO(data)) as img:
            np.asarray(img if img.mode == "RGB" else img.convert("RGB"))
    return time.perf_counter() - t0


def _limit_worker(k: int) -> float:
    return _decode_share(_LIMIT_PAYLOADS[k::WORKERS])


_LIMIT_PAYLOADS: list[bytes] = []


def decode_limit(payloads: list[bytes]) -> float:
    """Samples/s of WORKERS cores decoding with Pillow: WORKERS processes (forked, started before the clock) each
    decode their share of the payloads at the same time, so they meet the same machine load as the loader's
    workers; samples / wall time of the slowest."""
    import multiprocessing

    global _LIMIT_PAYLOADS
    _LIMIT_PAYLOADS = payloads
    try:
        with multiprocessing.get_context("fork").Pool(WORKERS) as pool:
            pool.map(abs, range(WORKERS))  # the processes are up
            t0 = time.perf_counter()
            pool.map(_limit_worker, range(WORKERS), chunksize=1)
            return len(payloads) / (time.perf_counter() - t0)
    finally:
        _LIMIT_PAYLOADS = []


def _svg(bars: list[tuple[str, float]], path: str, title: str) -> str:
    """A horizontal bar chart (plain SVG) of (label, samples/s), written atomically to `path`."""
    width, left, row = 760, 330, 26
    top = max(v for _, v in bars) or 1.0
    lines = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{40 + row * len(bars)}" '
        'font-family="sans-serif" font-size="12">',
        f'<text x="8" y="18" font-weight="bold">{title}</text>',
    ]
    for i, (label, value) in enumerate(bars):
        y = 30 + i * row
        w = (width - left - 90) * value / top
        colour = (
            "#999" if "limit" in label else ("#76b900" if label.startswith("energon-arrow") else "#4a7ebb")
        )
        lines += [
            f'<text x="8" y="{y + 15}">{label}</text>',
            f'<rect x="{left}" y="{y + 3}" width="{w:.1f}" height="{row - 8}" fill="{colour}"/>',
            f'<text x="{left + w + 6:.1f}" y="{y + 15}">{value:,.0f}/s</text>',
        ]
    lines.append("</svg>")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, path)
    return path


def run(args) -> list[Comparison]:
    base = os.environ.get("EA_BENCH_DIR", "/tmp/ea-bench-images")
    quick = args.quick
    repeats = 1 if quick else args.repeats
    fixed, shards, per_shard = fixed_dataset(quick)
    vshards, vper = (2, 64) if quick else (8, 250)
    varied = _prepared(f"{base}/varied-{vshards}x{vper}", vshards, vper, (64, 1024), True)
    payloads = benchmark_payloads(fixed, quick)
    limits = [decode_limit(payloads) for _ in range(repeats)]
    label = f"{shards}x{per_shard} JPEGs 384x384 q90, batch {BATCH}, {WORKERS} workers"
    out = []

    ours, ref = alternate(lambda: _ours(fixed), lambda: _energon(fixed), repeats)
    out.append(
        Comparison(f"float CHW default (identical per key), {label}", "samples/s", ours, ref, target=3.0)
    )
    out.append(
        Comparison(
            f"float CHW default vs decode limit ({WORKERS} x one core's Pillow rate), {label}",
            "samples/s",
            ours,
            limits,
            notes={"meaning": "ratio = share of the decode limit"},
        )
    )

    uint8, limit2 = alternate(
        lambda: _ours(fixed, image_decode="torchrgb8"), lambda: decode_limit(payloads), repeats
    )
    out.append(
        Comparison(
            f"uint8 mode (torchrgb8) vs decode limit ({WORKERS} x one core's Pillow rate), {label}",
            "samples/s",
            uint8,
            limit2,
            target=0.8,
            notes={"meaning": "ratio = share of the decode limit"},
        )
    )

    ours, ref = alternate(
        lambda: _ours(varied, image_size=TARGET), lambda: _energon(varied, _resize_encoder), repeats
    )
    out.append(
        Comparison(
            f"target size {TARGET} (center crop, float CHW) on {vshards}x{vper} JPEGs of 64-1024 px vs energon "
            f"resizing in encode_sample, batch {BATCH}, {WORKERS} workers",
            "samples/s",
            ours,
            ref,
            target=3.0,
        )
    )
    float_row, uint8_row, size_row = out[0], out[2], out[3]
    bars = [
        ("decode limit (2 x one core's Pillow rate)", uint8_row.reference_median),
        ("energon-arrow uint8 (torchrgb8)", uint8_row.ours_median),
        ("energon-arrow float CHW (default)", float_row.ours_median),
        ("energon 7.4.1 float CHW (default)", float_row.reference_median),
        (f"energon-arrow target size {TARGET}, varied set", size_row.ours_median),
        (f"energon 7.4.1 resize {TARGET} in encode_sample", size_row.reference_median),
    ]
    os.makedirs(RESULTS_DIR, exist_ok=True)
    _svg(
        bars,
        os.path.join(RESULTS_DIR, "images.svg"),
        f"samples/s, batch {BATCH}, {WORKERS} workers (medians)",
    )
    return out
