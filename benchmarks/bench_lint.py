"""`energon-arrow lint` vs `energon lint`, both CLIs end to end, `--parallel 2` on both.

Data: the loader benchmark's shape (64 shards x 1,000 samples, parts jpg / txt / json, prepared with
`energon prepare` as CaptioningSample {image: jpg, caption: txt}) but with real JPEGs (about 2 KB, 64x64): the
loader benchmark's jpg parts are random bytes, which no image decoder accepts, so lint would fail every sample
(energon stops after its consecutive-failure tolerance). Generated once under `$EA_BENCH_DIR/lint-64x1000`
(default /tmp/ea-bench-lint); --quick uses 8 x 500.
"""

from __future__ import annotations

import os
import shutil
import sys

from benchmarks.harness import Comparison, alternate, timed_command

PARALLEL = "2"


def _dataset(root: str, shards: int, per_shard: int) -> str:
    if os.path.exists(os.path.join(root, ".nv-meta", "index.sqlite")):
        return root
    from energon_arrow.adapters import open_storage
    from energon_arrow.testing.lint_data import jpeg_pool, lint_shard_bytes
    from energon_arrow.testing.reference import energon_cli

    shutil.rmtree(root, ignore_errors=True)
    storage = open_storage(root)
    storage.makedirs("shards")
    images = jpeg_pool(count=64, size=64)
    for s in range(shards):
        storage.write_atomic(f"shards/shard-{s:06d}.tar", lint_shard_bytes(s, per_shard, images, {}))
    energon_cli(
        "prepare", root, "--non-interactive", "--split-ratio", "1,0,0", "--no-progress", "--num-workers", "2",
        "--sample-type", "CaptioningSample", "--field-map", '{"image": "jpg", "caption": "txt"}',
    )  # fmt: skip
    return root


def run(args) -> list[Comparison]:
    from energon_arrow.testing.reference import energon_command

    shards, per_shard = (8, 500) if args.quick else (64, 1000)
    base = os.environ.get("EA_BENCH_DIR", "/tmp/ea-bench-lint")
    root = _dataset(os.path.join(base, f"lint-{shards}x{per_shard}"), shards, per_shard)
    ours_cmd = [sys.executable, "-m", "energon_arrow", "lint", root, "--no-progress", "--parallel", PARALLEL]
    ref_cmd = [*energon_command(), "lint", root, "--parallel", PARALLEL]
    ours, ref = alternate(
        lambda: timed_command(ours_cmd), lambda: timed_command(ref_cmd), 1 if args.quick else args.repeats
    )
    return [
        Comparison(
            name=f"lint {shards}x{per_shard} samples (jpg decode + txt), CLI end to end",
            unit="s",
            ours=ours,
            reference=ref,
            target=5.0,
            notes={
                "samples": shards * per_shard,
                "ours_cmd": f"energon-arrow lint --parallel {PARALLEL}",
                "reference_cmd": f"energon lint --parallel {PARALLEL}",
            },
        )
    ]
