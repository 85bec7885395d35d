"""Query layer at scale: synthetic side indexes of 10M and 100M samples (30M / 300M parts) with 1M sample exclusions
(--quick: 200k samples, 20k exclusions), written like prepare writes them (`energon_arrow.testing.scale_index`).

Sizes: `EA_QUERY_SCALE_SIZES` (default "10M"; "10M,100M" adds the 100M index, ~13 GB and a few minutes to
generate), generated once under `$EA_BENCH_DIR` (default benchmarks/data). Every connection runs with a DuckDB
memory limit of `EA_QUERY_SCALE_MEMORY` (default 1GB) and its spill folder under `$EA_BENCH_DIR`.

Measured, each in a fresh process (so that the peak RSS is the operation's own): opening the dataset (split.yaml
with the exclusions parsed into tables), resolving the sample exclusions to rows with no cache (what the first
query after a split.yaml change pays; it leaves the cache `query.exclusions` writes, which the later operations
read), `info`, GROUP BY over parts and over samples, counting every split's effective samples from the rows
(split_samples) and from the shards (split_sizes), and materialising the val split as an Arrow table. The
reference side of each comparison is the interactive budget the issue sets (5 s for 100M rows); the notes hold
the peak RSS and, below 100M, a linear extrapolation to 100M samples (what a larger index would take).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from benchmarks.harness import Comparison

DATA_DIR = os.path.join(os.path.dirname(__file__), "data")
BUDGET_S = 5.0
TARGET_ROWS = 100_000_000
SIZES = {"10M": 10_000_000, "100M": 100_000_000}
EXCLUSIONS = 1_000_000
LAYOUT = 3  # of the generated files (3: parquet_options encodings); older data is generated again
OPERATIONS = {
    "open": None,
    "resolve exclusions (no cache: first query after a split.yaml change)": "resolve",
    "info": "info",
    "group by part_name (parts)": "SELECT part_name, count(*), sum(content_size), avg(content_size) FROM parts "
    "GROUP BY ALL",
    "group by shard (samples)": "SELECT shard_id, count(*), sum(byte_size) FROM samples GROUP BY ALL",
    "split resolution (count per split)": "SELECT split, count(*) FROM split_samples GROUP BY ALL",
    "split sizes (count per split from the shards)": "SELECT * FROM split_sizes",
    "split('val') as Arrow": "split",
}

_CHILD = r"""
import json, os, resource, sys, time
from energon_arrow.query import QueryLimits, open_dataset
from energon_arrow.query.exclusions import cache_rel
from energon_arrow.query.info import dataset_info
root, op, sql, memory, spill = sys.argv[1:6]
if op == "resolve" and os.path.exists(os.path.join(root, cache_rel("split.yaml"))):
    os.remove(os.path.join(root, cache_rel("split.yaml")))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
cpu = lambda: sum(os.times()[:2])
t0, c0 = time.perf_counter(), cpu()
ds = open_dataset(root, verify=False, limits=QueryLimits(memory_limit=memory, temp_directory=spill))
opened, c1 = time.perf_counter(), cpu()
if op == "info":
    dataset_info(ds)
elif op == "resolve":
    ds.exclusions()
elif op == "split":
    ds.split("val")
elif sql:
    ds.sql(sql)
t1, c2 = time.perf_counter(), cpu()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"open": opened - t0, "op": t1 - opened, "open_cpu": c1 - c0, "op_cpu": c2 - c1,
                  "peak_mb": peak / 1024, "start_mb": before / 1024}))
"""


def _base() -> str:
    return os.environ.get("EA_BENCH_DIR", DATA_DIR)


def _dataset(n: int, exclusions: int) -> str:
    from energon_arrow.testing.scale_index import write_side_index

    root = os.path.join(_base(), f"query-scale-v{LAYOUT}-{n}-{exclusions}")
    if os.path.isfile(os.path.join(root, ".nv-meta", "index.uuid")):
        return root
    tmp = root + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    write_side_index(tmp, n, exclusions)
    os.replace(tmp, root)
    return root


def _measure(root: str, op: str, sql: str | None, memory: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]))
    spill = os.path.join(_base(), f"query-scale-spill-{os.getpid()}")
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, root, op, sql or "", memory, spill],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _load() -> str:
    return "load {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def run(args) -> list[Comparison]:
    if args.quick:
        sizes = [(200_000, 20_000)]
    else:
        names = [x for x in os.environ.get("EA_QUERY_SCALE_SIZES", "10M").split(",") if x]
        unknown = sorted(set(names) - set(SIZES))
        if unknown:
            raise SystemExit(f"EA_QUERY_SCALE_SIZES: unknown size(s) {unknown}; use {', '.join(SIZES)}")
        sizes = [(SIZES[x], EXCLUSIONS) for x in names]
    memory = os.environ.get("EA_QUERY_SCALE_MEMORY", "1GB")
    repeats = 1 if args.quick else max(1, min(args.repeats, 2))
    comparisons = []
    for n, exclusions in sizes:
        root = _dataset(n, exclusions)
        for name, what in OPERATIONS.items():
            op = what if what in ("info", "split", "resolve") else "sql"
            load = _load()
            runs = [_measure(root, op if what else "open", what if op == "sql" else None, memory)
                    for _ in range(repeats)]  # fmt: skip
            seconds = [r["open"] if what is None else r["op"] for r in runs]
            comparisons.append(
                Comparison(
                    name=f"{name} at {n:,} samples, {exclusions:,} exclusions (reference: {BUDGET_S:g} s budget)",
                    unit="s",
                    ours=seconds,
                    reference=[BUDGET_S],
                    target=1.0,
                    notes={
                        "samples": n,
                        "parts": 3 * n,
                        "exclusions": exclusions,
                        "duckdb_memory_limit": memory,
                        "open_s": [round(r["open"], 3) for r in runs],
                        # CPU seconds (both cores): steadier than the wall time on a shared machine
                        "cpu_s": [round(r["open_cpu"] if what is None else r["op_cpu"], 2) for r in runs],
                        "peak_rss_mb": [round(r["peak_mb"], 1) for r in runs],
                        "machine": f"{os.cpu_count()} cores, {load} before the runs",
                        # opening scales with the exclusions and shards, not with the rows
                        "extrapolated_100M_s": None
                        if what is None or n >= TARGET_ROWS
                        else round(min(seconds) * TARGET_ROWS / n, 2),
                    },
                )
            )
    return comparisons
