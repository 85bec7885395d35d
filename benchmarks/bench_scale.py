"""Scaling curves (issue 16): prepare time, open + first batch, steady samples/s and peak RSS against dataset size,
energon-arrow and megatron-energon 7.4.1 side by side.

Datasets: 64k and 640k samples are real synthetic shards of 1,000 samples (jpg 16 B / txt / json), prepared by
both tools (`energon-arrow prepare`, `energon prepare`; energon's copy hard-links the same shards). 6.4M and 100M
(10,000 per shard) are index-only for energon-arrow: one real template shard hard-linked as every shard and the
Parquet side index tiled from it (testing/scale_dataset.py; energon-arrow's prepare refuses keys repeated across
shards), so "prepare" there is the loader's row-index build alone; energon prepares the linked shards for real at
6.4M (it accepts repeated keys) and is not run at 100M. `--quick`: 64k and 640k only.

Each measurement runs in a fresh process: imports first (reported apart), then `get_train_dataset` +
`get_loader` (2 workers, batch 32, raw bytes, shuffle buffer 100, 100 samples per sequence) until the first batch
("open + first batch"), then 100 more batches ("steady samples/s"). Peak RSS of the main process (and its growth
over the after-import baseline) and the peak RSS / private dirty memory of the DataLoader workers are sampled.
energon runs while its cumulative time stays within `EA_SCALE_BUDGET_S` (default 900 s); sizes it does not
finish are left empty. `EA_SCALE_SIZES` picks sizes (e.g. "64k,640k,6.4M,100M"), `EA_BENCH_DIR` the folder
(default /tmp/ea-bench-scale). Results: benchmarks/results/scale.json (harness), scale.csv beside it, and
log-log plots docs/img/scale_*.png (matplotlib, the `bench` extra).
"""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import subprocess
import sys
import time

from benchmarks.harness import RESULTS_DIR, Comparison

SIZES = {"64k": (64, 1000), "640k": (640, 1000), "6.4M": (6400, 1000), "100M": (10_000, 10_000)}
INDEX_ONLY = {"6.4M", "100M"}  # energon-arrow: tiled side index, "prepare" = the row-index build
ENERGON_INDEX_ONLY = {"6.4M"}  # energon prepares the template shard linked as every shard
IMAGE_BYTES = 16
BATCH, WORKERS, STEADY_BATCHES = 32, 2, 100
IMG_DIR = os.path.join(os.path.dirname(os.path.dirname(__file__)), "docs", "img")

_CHILD = r"""
import json, os, resource, sys, threading, time
import psutil
tool, root = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
if tool == "ours":
    import energon_arrow as api
    import energon_arrow.loader.dataset, energon_arrow.energon.energon_api, energon_arrow.loader.loader  # noqa
    import energon_arrow.loader.source, energon_arrow.query  # noqa: F401  (imported lazily by the first open)
    import energon_arrow.query.sideindex, energon_arrow.query.splits, fsspec  # noqa: F401  (likewise)
else:
    from megatron import energon as api
import pandas, pyarrow.compute, torch  # noqa: F401  (import costs reported apart from the open)
imports = time.perf_counter() - t0
me = psutil.Process()
base = me.memory_info().rss
peak = {"main": base, "worker": 0, "worker_private": 0}
stop = threading.Event()

def private_dirty(pid):
    total, anon = 0, False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split(maxsplit=6)
            if "-" in head[0] and len(head) >= 5 and ":" in head[3]:
                name = head[5].strip() if len(head) > 5 else ""
                anon = name in ("", "[heap]", "[stack]") or name.startswith("[anon")
            elif anon and line.startswith("Private_Dirty:"):
                total += int(head[1]) * 1024
    return total

def watch():
    while not stop.is_set():
        try:
            peak["main"] = max(peak["main"], me.memory_info().rss)
            for c in me.children(recursive=True):
                peak["worker"] = max(peak["worker"], c.memory_info().rss)
                peak["worker_private"] = max(peak["worker_private"], private_dirty(c.pid))
        except (psutil.Error, OSError):
            pass
        time.sleep(0.01)

threading.Thread(target=watch, daemon=True).start()

class TE(api.DefaultTaskEncoder):
    decoder = None

t1, c1 = time.perf_counter(), time.process_time()
ds = api.get_train_dataset(root, worker_config=api.WorkerConfig(rank=0, world_size=1, num_workers=%(workers)d),
                           batch_size=%(batch)d, shuffle_buffer_size=100, max_samples_per_sequence=100,
                           task_encoder=TE())
it = iter(api.get_loader(ds))
next(it)
first, first_cpu = time.perf_counter() - t1, time.process_time() - c1
t2 = time.perf_counter()
n = sum(len(next(it).__key__) for _ in range(%(steady)d))
steady = n / (time.perf_counter() - t2)
stop.set()
peak["main"] = max(peak["main"], resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
print(json.dumps({"imports_s": imports, "open_first_s": first, "open_first_cpu_s": first_cpu, "steady_sps": steady,
                  "main_peak_mib": peak["main"] / 2**20, "main_growth_mib": (peak["main"] - base) / 2**20,
                  "worker_peak_mib": peak["worker"] / 2**20, "worker_private_mib": peak["worker_private"] / 2**20}))
"""


def _measure(tool: str, root: str, timeout: float) -> dict | None:
    code = _CHILD % {"workers": WORKERS, "batch": BATCH, "steady": STEADY_BATCHES}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]))
    try:
        proc = subprocess.run([sys.executable, "-c", code, tool, root], capture_output=True, text=True,
                              timeout=max(1.0, timeout), env=env)  # fmt: skip
    except subprocess.TimeoutExpired:
        return None
    if proc.returncode != 0:
        raise RuntimeError(f"{tool} on {root} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _timed_cli(cmd: list[str], timeout: float) -> float | None:
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=max(1.0, timeout))
    except subprocess.TimeoutExpired:
        return None
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t0


def _datasets(base: str, size: str) -> tuple[str, str | None]:
    """(energon-arrow's dataset, energon's or None). Real sizes: distinct synthetic shards (energon-arrow's
    prepare wants dataset-unique keys), hard-linked into energon's copy (its own .nv-meta). Index-only sizes:
    the tiled side index for energon-arrow; for energon (6.4M only) the template shard linked as every shard."""
    from energon_arrow.testing.scale_dataset import link_shards, write_scale_dataset
    from energon_arrow.testing.synthetic import write_webdataset

    shards, per_shard = SIZES[size]
    ours, theirs = os.path.join(base, f"{size}-ours"), os.path.join(base, f"{size}-energon")
    if size in INDEX_ONLY:
        if not os.path.isdir(ours):
            write_scale_dataset(ours, shards, per_shard, image_bytes=IMAGE_BYTES)
        if size in ENERGON_INDEX_ONLY:
            if not os.path.isdir(theirs):
                link_shards(theirs, shards, per_shard, image_bytes=IMAGE_BYTES)
            return ours, theirs
        return ours, None
    if not os.path.isdir(os.path.join(ours, "shards")):
        write_webdataset(ours, shards=shards, samples_per_shard=per_shard, image_bytes=IMAGE_BYTES)
    os.makedirs(os.path.join(theirs, "shards"), exist_ok=True)
    for name in os.listdir(os.path.join(ours, "shards")):
        dst = os.path.join(theirs, "shards", name)
        if name.endswith(".tar") and not os.path.exists(dst):
            os.link(os.path.join(ours, "shards", name), dst)
    return ours, theirs


def _prepare_ours(root: str, index_only: bool) -> float:
    if index_only:  # the side index exists (tiled): time the loader's row-index build alone
        from energon_arrow.loader.row_index import LOCAL_REL

        shutil.rmtree(os.path.join(root, LOCAL_REL), ignore_errors=True)
        # in a child process: Linux keeps ru_maxrss across fork + exec, so a build in this process would show
        # up as the peak RSS of every measurement process started after it
        code = (
            "import sys, time\nfrom energon_arrow.adapters import open_storage\n"
            "from energon_arrow.loader.row_index import write_row_index\n"
            "t0 = time.perf_counter()\nwrite_row_index(open_storage(sys.argv[1]))\nprint(time.perf_counter() - t0)"
        )
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]))
        proc = subprocess.run([sys.executable, "-c", code, root], capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            raise RuntimeError(f"row index build of {root} failed:\n{proc.stderr[-3000:]}")
        return float(proc.stdout.strip().splitlines()[-1])
    shutil.rmtree(os.path.join(root, ".nv-meta"), ignore_errors=True)
    cmd = [sys.executable, "-m", "energon_arrow", "prepare", root, "--non-interactive", "--split-ratio", "1,0,0", "--sample-type",
           "CaptioningSample", "--field-map", '{"image": "jpg", "caption": "txt"}', "--num-workers", "2"]  # fmt: skip
    took = _timed_cli(cmd, 24 * 3600)
    assert took is not None
    return took


def _prepare_energon(root: str, timeout: float) -> float | None:
    from energon_arrow.testing.reference import energon_command

    shutil.rmtree(os.path.join(root, ".nv-meta"), ignore_errors=True)
    cmd = [*energon_command(), "prepare", root, "--non-interactive", "--split-ratio", "1,0,0", "--no-progress",
           "--num-workers", "2", "--sample-type", "CaptioningSample", "--field-map",
           '{"image": "jpg", "caption": "txt"}']  # fmt: skip
    return _timed_cli(cmd, timeout)


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def run(args) -> list[Comparison]:
    base = os.environ.get("EA_BENCH_DIR", "/tmp/ea-bench-scale")
    budget = float(os.environ.get("EA_SCALE_BUDGET_S", "900"))
    default = "64k,640k" if args.quick else ",".join(SIZES)
    sizes = [s for s in os.environ.get("EA_SCALE_SIZES", default).split(",") if s]
    unknown = sorted(set(sizes) - set(SIZES))
    if unknown:
        raise SystemExit(f"EA_SCALE_SIZES: unknown size(s) {unknown}; use {', '.join(SIZES)}")
    os.makedirs(base, exist_ok=True)
    rows, spent = [], 0.0
    for size in sizes:
        shards, per_shard = SIZES[size]
        ours_root, theirs_root = _datasets(base, size)
        row = {
            "size": size,
            "samples": shards * per_shard,
            "shards": shards,
            "index_only": size in INDEX_ONLY,
        }
        row["load_before"] = _load()
        row["ours_prepare_s"] = _prepare_ours(ours_root, size in INDEX_ONLY)
        row.update({f"ours_{k}": v for k, v in (_measure("ours", ours_root, 3600) or {}).items()})
        if theirs_root is not None and spent < budget:
            t0 = time.perf_counter()
            prep = _prepare_energon(theirs_root, budget - spent)
            got = (
                _measure("energon", theirs_root, budget - spent - (time.perf_counter() - t0))
                if prep
                else None
            )
            spent += time.perf_counter() - t0
            if prep is not None:
                row["energon_prepare_s"] = prep
            row.update({f"energon_{k}": v for k, v in (got or {}).items()})
        row["load_after"] = _load()
        rows.append(row)
        print(f"  {size}: {json.dumps(row)}", flush=True)
    _write_csv(rows)
    _plot(rows)
    return _comparisons(rows)


_METRICS = [
    ("prepare_s", "prepare", "s"),
    ("open_first_s", "open + first batch", "s"),
    ("open_first_cpu_s", "open + first batch, CPU time of the main process", "s"),
    ("steady_sps", "steady", "samples/s"),
    ("main_peak_mib", "peak RSS main process", "MiB"),
    ("main_growth_mib", "RSS growth of the main process over its after-import baseline", "MiB"),
    ("worker_peak_mib", "peak RSS per worker", "MiB"),
    ("worker_private_mib", "peak private dirty memory per worker", "MiB"),
]


def _comparisons(rows: list[dict]) -> list[Comparison]:
    out = []
    for row in rows:
        for key, label, unit in _METRICS:
            ours, ref = row.get(f"ours_{key}"), row.get(f"energon_{key}")
            if ours is None:
                continue
            notes = {"load": f"{row['load_before']} -> {row['load_after']}"}
            if unit == "MiB":
                notes["meaning"] = "ratio = ours / energon: below 1 is less memory"
            name = f"{label}, {row['size']} samples ({row['shards']} shards{', index-only' if row['index_only'] else ''})"
            out.append(
                Comparison(
                    name,
                    "MiB" if "mib" in key else unit,
                    [ours],
                    [math.nan if ref is None else ref],
                    notes={"load": f"{row['load_before']} -> {row['load_after']}"},
                )  # fmt: skip
            )
    return out


def _write_csv(rows: list[dict]) -> str:
    os.makedirs(RESULTS_DIR, exist_ok=True)
    path = os.path.join(RESULTS_DIR, "scale.csv")
    keys = sorted({k for r in rows for k in r}, key=lambda k: (k not in ("size", "samples", "shards"), k))
    with open(path + ".tmp", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    os.replace(path + ".tmp", path)
    return path


def _plot(rows: list[dict]) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("  matplotlib is not installed (pip install energon-arrow[bench]): no plots", flush=True)
        return []
    os.makedirs(IMG_DIR, exist_ok=True)
    paths = []
    panels = [("prepare_s", "prepare time (s)"), ("open_first_s", "open + first batch (s)"),
              ("steady_sps", "steady samples/s"), ("main_peak_mib", "peak RSS, main process (MiB)")]  # fmt: skip
    fig, axes = plt.subplots(2, 2, figsize=(10, 8))
    for ax, (key, title) in zip(axes.flat, panels):
        for tool, style in (("ours", "o-"), ("energon", "s--")):
            pts = [(r["samples"], r[f"{tool}_{key}"]) for r in rows if r.get(f"{tool}_{key}") is not None]
            if pts:
                ax.plot(*zip(*pts), style, label="energon-arrow" if tool == "ours" else "energon 7.4.1")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("samples")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    path = os.path.join(IMG_DIR, "scale_curves.png")
    fig.savefig(path + ".tmp.png", dpi=100)
    os.replace(path + ".tmp.png", path)
    plt.close(fig)
    paths.append(path)
    return paths
