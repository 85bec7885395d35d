"""Property-based fuzzing of every parsed input (tests/reliability/fuzz_targets.py), one subprocess per input type
so that a crash or a hang in a C extension fails the test instead of the test session.

Fixed seed and budget in CI; `EA_FUZZ_EXAMPLES=N` runs N examples per target (the long run in docs/reliability.md);
`EA_FUZZ_ASAN=1` also runs the C-extension targets against extensions rebuilt with AddressSanitizer.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import sysconfig

import pytest

from tests.reliability.fuzz_targets import TARGETS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# CI budget per target: a few seconds each on 2 cores
BUDGET = {"page_writer": 40, "tar": 120}
DEFAULT_BUDGET = 150


def examples(target: str) -> int:
    return int(os.environ.get("EA_FUZZ_EXAMPLES") or BUDGET.get(target, DEFAULT_BUDGET))


def run_target(target: str, n: int, env: dict | None = None, cwd: str = ROOT, timeout: float = 600) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.reliability.fuzz_targets", target, str(n)],
        cwd=cwd,  # first on sys.path: the package imported is the one in cwd
        capture_output=True,
        env={**os.environ, "PYTHONPATH": ROOT, **(env or {})},
        timeout=timeout,
    )
    err = proc.stderr.decode(errors="replace")
    # a negative code is a signal (SIGSEGV, SIGABRT...); the watchdog exits 1 with "Timeout" and a traceback
    assert proc.returncode == 0, f"fuzz target {target} exited {proc.returncode}:\n{err[-4000:]}"
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_fuzz_target(target):
    result = run_target(target, examples(target))
    assert result["cases"] >= examples(target) or target == "kernels" and result["cases"] == 0
    print(json.dumps(result))


def build_asan_copy(dest: str) -> str:
    """A copy of the energon_arrow package whose C extensions are rebuilt with -fsanitize=address."""
    pkg = os.path.join(dest, "energon_arrow")
    shutil.copytree(
        os.path.join(ROOT, "energon_arrow"), pkg, ignore=shutil.ignore_patterns("*.so", "__pycache__")
    )
    include = sysconfig.get_paths()["include"]
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    flags = [
        "-shared",
        "-fPIC",
        "-O1",
        "-g",
        "-fsanitize=address",
        "-fno-omit-frame-pointer",
        "-ffp-contract=off",
    ]
    for module, sources in (
        ("tokens/_kernels", sorted(glob.glob(os.path.join(pkg, "tokens", "kernels", "*.c")))),
        ("index/_sqlite_pages", [os.path.join(pkg, "index", "kernels", "sqlite_pages.c")]),
        ("tar/_headers", [os.path.join(pkg, "tar", "kernels", "headers.c")]),
    ):
        out = os.path.join(pkg, module + suffix)
        subprocess.run(["gcc", *flags, f"-I{include}", *sources, "-o", out], check=True, capture_output=True)
    return dest


@pytest.mark.skipif(
    not os.environ.get("EA_FUZZ_ASAN"), reason="set EA_FUZZ_ASAN=1 for the AddressSanitizer run"
)
@pytest.mark.parametrize("target", ["kernels", "page_writer", "idx_bin", "tar"])
def test_fuzz_c_extensions_under_asan(target, tmp_path):
    libasan = subprocess.run(
        ["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True
    ).stdout.strip()
    copy = build_asan_copy(str(tmp_path))
    check = f"import energon_arrow.tokens._kernels as k; assert k.__file__.startswith({copy!r})"
    env = {
        "PYTHONPATH": f"{copy}:{ROOT}",
        "LD_PRELOAD": libasan,
        # Python itself leaks by design at exit; an invalid access still aborts with a report
        "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
    }
    subprocess.run([sys.executable, "-c", check], env={**os.environ, **env}, check=True, cwd=str(tmp_path))
    result = run_target(target, examples(target), env, cwd=copy)
    assert result["cases"] > 0
    print(json.dumps({**result, "asan": True}))
