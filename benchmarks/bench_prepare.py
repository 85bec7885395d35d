"""`energon-arrow prepare` vs `energon prepare --num-workers 2`, end to end (CLI, index.sqlite included), plus
S3 prepare throughput vs the storage adapter's sequential read throughput on SeaweedFS.

Data: 64 shards x 1,000 samples x 3 parts (2 KiB jpg, txt, json) under benchmarks/data/prepare/ (generated once;
the reference side gets hard links to the same tars in its own folder so the two `.nv-meta` never mix).
`BENCH_PREPARE_PARTS=s3` runs the S3 part alone; `BENCH_PREPARE_SHARDS=256` a larger data set.
`BENCH_PREPARE_VS=<checkout>` adds part `vs`: this checkout's `energon-arrow prepare` against the same command of
another checkout of energon-arrow (e.g. the commit before a change; its C extensions built in place), alternating
(`BENCH_PREPARE_PARTS=vs` runs it alone); the target is at most 5% slower.
"""

from __future__ import annotations

import compileall
import os
import shutil
import sys
import time
import uuid

from benchmarks.harness import Comparison, alternate, carried_rows, selected_parts, timed_command
from energon_arrow.adapters import open_storage
from energon_arrow.testing.reference import energon_command
from energon_arrow.testing.synthetic import write_webdataset

HERE = os.path.dirname(os.path.abspath(__file__))


def _dataset(quick: bool) -> tuple[str, str, int, int]:
    shards, samples = (8, 200) if quick else (int(os.environ.get("BENCH_PREPARE_SHARDS", "64")), 1000)
    base = os.path.join(HERE, "data", f"prepare-{shards}x{samples}")
    ours, ref = os.path.join(base, "ours"), os.path.join(base, "energon")
    if not os.path.isdir(os.path.join(ours, "shards")):
        shutil.rmtree(base, ignore_errors=True)
        write_webdataset(ours, shards=shards, samples_per_shard=samples, image_bytes=2048)
        os.makedirs(os.path.join(ref, "shards"))
        for name in sorted(os.listdir(os.path.join(ours, "shards"))):
            if name.endswith(".tar"):
                os.link(os.path.join(ours, "shards", name), os.path.join(ref, "shards", name))
    return ours, ref, shards, samples


def _local(args) -> Comparison:
    ours_dir, ref_dir, shards, samples = _dataset(args.quick)
    common = ["--non-interactive", "--split-ratio", "8,1,1", "--force-overwrite", "--no-progress"]
    ours_cmd = [sys.executable, "-m", "energon_arrow", "prepare", ours_dir, *common, "--num-workers", "2"]
    ref_cmd = [*energon_command(), "prepare", ref_dir, *common, "--num-workers", "2"]
    ours, ref = alternate(
        lambda: timed_command(ours_cmd), lambda: timed_command(ref_cmd), 1 if args.quick else args.repeats
    )
    return Comparison(
        name=f"prepare local {shards}x{samples}x3 (CLI end to end)",
        unit="s",
        ours=ours,
        reference=ref,
        target=10.0,
        notes={
            "samples": shards * samples,
            "ours_cmd": "energon-arrow prepare --num-workers 2",
            "reference_cmd": "energon prepare --num-workers 2",
        },
    )


def _versus(args) -> Comparison:
    other = os.path.abspath(os.environ["BENCH_PREPARE_VS"])
    compileall.compile_dir(
        os.path.join(other, "energon_arrow"), quiet=1
    )  # as benchmarks.run does for this one
    ours_dir, _, shards, samples = _dataset(args.quick)
    common = ["--non-interactive", "--split-ratio", "8,1,1", "--force-overwrite", "--no-progress"]
    cmd = [sys.executable, "-m", "energon_arrow", "prepare", ours_dir, *common, "--num-workers", "2"]
    repeats = max(3, args.repeats) if args.quick else 2 * args.repeats
    ours, ref = alternate(lambda: timed_command(cmd), lambda: timed_command(cmd, cwd=other), repeats)
    return Comparison(
        name=f"prepare local {shards}x{samples}x3 (CLI end to end) vs another checkout",
        unit="s",
        ours=ours,
        reference=ref,
        target=1 / 1.05,
        notes={"samples": shards * samples, "reference": f"energon-arrow prepare of {other}"},
    )


def _s3(args) -> Comparison:
    from energon_arrow.index.prepare import PrepareOptions, prepare_dataset
    from energon_arrow.meta import parse_split_ratio
    from energon_arrow.testing.seaweedfs import start_seaweedfs

    ours_dir, _, shards, samples = _dataset(args.quick)
    server = start_seaweedfs()
    try:
        bucket = server.create_bucket("bench-prepare")
        url = f"s3://{bucket}/{uuid.uuid4().hex[:8]}"
        store = open_storage(url, server.storage_options)
        names = sorted(f for f in os.listdir(os.path.join(ours_dir, "shards")) if f.endswith(".tar"))
        total = 0
        for name in names:
            with open(os.path.join(ours_dir, "shards", name), "rb") as f:
                data = f.read()
            store.write_atomic(f"shards/{name}", data)
            total += len(data)
        # both sides list or stat through the same s3fs client: build it before timing, not in the first run
        store.list_files("shards/*")

        def sequential_read() -> float:
            t0 = time.perf_counter()
            for name in names:
                with store.open_stream(f"shards/{name}") as f:
                    while f.read(8 << 20):
                        pass
            return total / (time.perf_counter() - t0) / 2**20

        def prepare() -> float:
            t0 = time.perf_counter()
            prepare_dataset(
                url,
                PrepareOptions(split_ratio=parse_split_ratio("8,1,1"), force=True, num_workers=4),
                storage_options=server.storage_options,
            )
            return total / (time.perf_counter() - t0) / 2**20

        ours, ref = alternate(prepare, sequential_read, 1 if args.quick else args.repeats)
    finally:
        server.stop()
    return Comparison(
        name=f"prepare on S3 (SeaweedFS) {shards}x{samples}x3 vs sequential read",
        unit="MiB/s",
        ours=ours,
        reference=ref,
        target=0.7,
        notes={"bytes": total, "reference": "Storage.open_stream read of every shard, one after the other"},
    )


def run(args) -> list[Comparison]:
    """`BENCH_PREPARE_PARTS=local,s3,vs` selects the parts (default all; `vs` only with `BENCH_PREPARE_VS`);
    `BENCH_PREPARE_SHARDS=N` the shard count of the full-size data (default 64)."""
    parts = selected_parts("BENCH_PREPARE_PARTS", ("local", "s3", "vs"))
    if "BENCH_PREPARE_VS" not in os.environ:
        if "vs" in os.environ.get("BENCH_PREPARE_PARTS", "").split(","):
            raise SystemExit("BENCH_PREPARE_PARTS=vs needs BENCH_PREPARE_VS=<checkout of energon-arrow>")
        parts.discard("vs")
    runs = (("local", _local), ("s3", _s3), ("vs", _versus))
    out = [run_part(args) for name, run_part in runs if name in parts]
    ran = {c.name for c in out}
    return out + carried_rows("prepare", lambda name: name not in ran)  # the parts not run now
