"""The seeded fault campaign (benchmarks/fault_campaign.py) in its `--quick` form with 2 seeds, so that the script
keeps working: it starts its own SeaweedFS, runs every scenario through the FaultProxy in both corruption
directions, writes its JSON and survives the (short) outage. Wrong results are asserted 0 for every scenario but
info/query: the full campaign met one wrong info/query answer in 80 runs (DuckDB scans samples.parquet and
parts.parquet in place, checked by size only: docs/reliability.md, Seeded campaign), which 4 quick runs could meet."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from benchmarks.fault_campaign import SCENARIOS

pytestmark = pytest.mark.s3
INFO = "info+query"  # the scenario that may still meet a wrong answer (module docstring)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_quick_campaign_runs(tmp_path):
    out = tmp_path / "campaign.json"
    env = {**os.environ, "PYTHONPATH": REPO}
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.fault_campaign", "--quick", "--seeds", "2", "--output", str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["seeds"] == 2 and result["quick"]
    assert set(result["scenarios"]) == set(SCENARIOS)
    for name, s in result["scenarios"].items():
        assert s["runs"] == 4, name  # 2 seeds x 2 directions
        assert s["identical"] + s["errors"] + s["wrong"] >= s["runs"], name
        if name != INFO:
            assert s["wrong"] == 0, (name, result["wrong"])
    assert sum(s["faults"].get("corrupt_response", 0) for s in result["scenarios"].values()) > 0
    assert sum(s["faults"].get("corrupt_request", 0) for s in result["scenarios"].values()) > 0
    for work in ("prepare", "loader epoch"):
        assert result["outage"][work]["identical"] and result["outage"][work]["outage_answers"] > 0
    assert "scenario" in proc.stdout and "identical" in proc.stdout
