"""Run named benchmarks: `python -m benchmarks.run NAME [NAME ...] | all [--quick] [--repeats N]`."""

from __future__ import annotations

import argparse
import compileall
import importlib
import os
import sys

from benchmarks.harness import write_results


def available() -> list[str]:
    here = os.path.dirname(__file__)
    return sorted(
        f[len("bench_") : -3] for f in os.listdir(here) if f.startswith("bench_") and f.endswith(".py")
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("names", nargs="+", help=f"benchmarks to run, or 'all' ({', '.join(available())})")
    parser.add_argument("--quick", action="store_true", help="smaller data, fewer repeats (smoke run)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    names = available() if args.names == ["all"] else args.names
    unknown = sorted(set(names) - set(available()))
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; available: {available()}")
    # Byte-compile the package first, as pip does when it installs a wheel (the references are installed that
    # way): with PYTHONDONTWRITEBYTECODE set, a source checkout would otherwise compile its modules in every
    # CLI process a benchmark starts (~0.1 s each).
    compileall.compile_dir(
        os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "energon_arrow"), quiet=1
    )
    failed = False
    for name in names:
        print(f"== {name}", flush=True)
        module = importlib.import_module(f"benchmarks.bench_{name}")
        comparisons = module.run(args)
        for c in comparisons:
            print("  " + c.line(), flush=True)
            failed |= c.meets_target is False
        print(f"  results: {write_results(name, comparisons)}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
