"""Run the reference `energon` CLI (megatron-energon, a test/bench extra) with this interpreter.

Running it as `sys.executable -c ...` instead of looking up an `energon` script on PATH means tests and benchmarks
use the megatron-energon installed beside them (a venv's bin/ is often not on PATH).
"""

from __future__ import annotations

import subprocess
import sys


def energon_command() -> list[str]:
    """The argv prefix that runs the reference `energon` CLI."""
    return [sys.executable, "-c", "from megatron.energon.cli.main import main; main()"]


def energon_cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """`energon ARGS...`; with `check`, a failure raises RuntimeError carrying energon's stderr."""
    proc = subprocess.run([*energon_command(), *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RuntimeError(f"energon {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


def energon_prepare(
    root: str, split_ratio: str = "3,1,0", sample_type: str = "CaptioningSample", field_map: str | None = None
) -> None:
    """`energon prepare ROOT` non-interactively with a ratio split and a field-map dataset.yaml (default:
    CaptioningSample with image <- jpg, caption <- txt)."""
    energon_cli(*prepare_args(root, split_ratio, sample_type, field_map))


def prepare_args(
    root: str, split_ratio: str = "3,1,0", sample_type: str = "CaptioningSample", field_map: str | None = None
) -> list[str]:
    """The `energon prepare` arguments of `energon_prepare`."""
    if field_map is None:
        field_map = '{"image": "jpg", "caption": "txt"}'
    return [
        "prepare", root, "--non-interactive", "--split-ratio", split_ratio, "--no-progress",
        "--sample-type", sample_type, "--field-map", field_map,
    ]  # fmt: skip
