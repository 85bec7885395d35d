"""megatron-energon 7.4.1 run in the test process: the reference datasets of the fixtures are prepared by energon's
own click command called in-process (`energon_arrow.testing.reference` starts a fresh interpreter instead, which
costs ~2.5 s of CPU importing megatron.energon for a prepare of a test dataset that takes ~0.3 s; most test modules
make one). The package itself never imports the reference packages (tests/test_packaging.py)."""

from __future__ import annotations

import contextlib
import io

from energon_arrow.testing.reference import prepare_args


def energon_in_process(*args: str) -> str:
    """`energon ARGS...` run by energon's click entry point in this process; what it printed. A failure raises
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


def energon_prepare(
    root: str, split_ratio: str = "3,1,0", sample_type: str = "CaptioningSample", field_map: str | None = None
) -> None:
    """`energon_arrow.testing.reference.energon_prepare` in this process."""
    energon_in_process(*prepare_args(root, split_ratio, sample_type, field_map))
