"""Run the reference `energon` CLI (megatron-energon, a test/bench extra) with this interpreter.

Running it as `sys.executable -c ...` instead of looking up an `energon` script on PATH means tests and benchmarks
use the megatron-energon installed beside them (a venv's bin/ is often not on PATH). `energon_prepare` runs the
same click command in this process instead: a fresh interpreter costs ~2.5 s of CPU (importing megatron.energon)
for a prepare of a test dataset that takes ~0.3 s, and the test fixtures make a reference dataset in most modules.
"""

from __future__ import annotations

import contextlib
import io
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
    if field_map is None:
        field_map = '{"image": "jpg", "caption": "txt"}'
    energon_in_process(
        "prepare", root, "--non-interactive", "--split-ratio", split_ratio, "--no-progress",
        "--sample-type", sample_type, "--field-map", field_map,
    )  # fmt: skip


def energon_in_process(*args: str) -> str:
    """`energon ARGS...` run by energon's click entry point in this process; its stdout. A failure raises
    RuntimeError with the command, the error and the end of what it printed."""
    from megatron.energon.cli.main import main

    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            main([*args], standalone_mode=False)
    except (Exception, SystemExit) as exc:
        if not isinstance(exc, SystemExit) or exc.code:
            raise RuntimeError(f"energon {' '.join(args)} failed: {exc!r}\n{out.getvalue()[-3000:]}") from exc
    return out.getvalue()
