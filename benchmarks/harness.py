"""Side-by-side benchmark harness: alternate the sides of a comparison in one process, repeat, report medians.

A benchmark module `benchmarks/bench_<name>.py` defines `run(args) -> list[Comparison]` (args: the runner's
argparse namespace, with `quick` and `repeats`). Results go to `benchmarks/results/<name>.json`.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

RESULTS_DIR = os.path.join(os.path.dirname(__file__), "results")


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class Comparison:
    """One measured comparison. `ratio` = reference median / ours median for times (higher is better for us),
    or ours / reference for throughputs: always "how many times better we are"."""

    name: str
    unit: str  # "s" (lower is better) or a throughput unit like "samples/s" (higher is better)
    ours: list[float]
    reference: list[float]
    target: float | None = None  # the ratio the issue asks for
    notes: dict = field(default_factory=dict)

    @property
    def ours_median(self) -> float:
        return statistics.median(self.ours)

    @property
    def reference_median(self) -> float:
        return statistics.median(self.reference)

    @property
    def ratio(self) -> float:
        if self.unit == "s":
            return self.reference_median / self.ours_median
        return self.ours_median / self.reference_median

    @property
    def meets_target(self) -> bool | None:
        return None if self.target is None else self.ratio >= self.target

    def to_json(self) -> dict:
        d = asdict(self)
        d.update(
            ours_median=self.ours_median,
            reference_median=self.reference_median,
            ratio=self.ratio,
            meets_target=self.meets_target,
        )
        return d

    def line(self) -> str:
        target = (
            ""
            if self.target is None
            else f" (target {self.target:g}x: {'met' if self.meets_target else 'MISSED'})"
        )
        return (
            f"{self.name}: ours {self.ours_median:.4g} {self.unit}, reference {self.reference_median:.4g} "
            f"{self.unit}, ratio {self.ratio:.2f}x{target}"
        )


def timed_command(cmd: list[str], cwd: str = REPO) -> float:
    """Seconds one command line takes end to end, run from the repository root (or `cwd`); a failure raises
    RuntimeError with its exit code and the end of its stderr."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return elapsed


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def alternate(
    ours: Callable[[], float], reference: Callable[[], float], repeats: int
) -> tuple[list[float], list[float]]:
    """Run both sides `repeats` times, alternating which goes first, so drift hits both equally.
    Each callable returns its measurement (seconds or a throughput)."""
    a, b = [], []
    for i in range(repeats):
        if i % 2 == 0:
            a.append(ours())
            b.append(reference())
        else:
            b.append(reference())
            a.append(ours())
    return a, b


def write_results(name: str, comparisons: list[Comparison], extra: dict | None = None) -> str:
    os.makedirs(RESULTS_DIR, exist_ok=True)
    path = os.path.join(RESULTS_DIR, f"{name}.json")
    doc = {
        "benchmark": name,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "comparisons": [c.to_json() for c in comparisons],
        **(extra or {}),
    }
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2)
    os.replace(tmp, path)
    return path


def selected_parts(variable: str, parts: tuple[str, ...]) -> set[str]:
    """The parts of a benchmark named in the environment variable `variable` (comma-separated; default: all)."""
    chosen = set(os.environ.get(variable, ",".join(parts)).split(","))
    unknown = sorted(chosen - set(parts))
    if unknown:
        raise SystemExit(f"{variable}: unknown part(s) {unknown}; use {' and/or '.join(parts)}")
    return chosen


def carried_rows(name: str, keep: Callable[[str], bool]) -> list[Comparison]:
    """The rows of the previous `results/<name>.json` whose comparison name satisfies `keep`, marked with
    `carried_from` (when they were measured): a benchmark that ran only some of its parts keeps the others."""
    path = os.path.join(RESULTS_DIR, f"{name}.json")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        doc = json.load(f)
    return [
        Comparison(
            c["name"],
            c["unit"],
            c["ours"],
            c["reference"],
            c["target"],
            dict(c["notes"], carried_from=c["notes"].get("carried_from", doc["when"])),
        )
        for c in doc["comparisons"]
        if keep(c["name"])
    ]
