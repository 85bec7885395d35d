"""`energon-arrow lint`: every sample decoded, failures named by shard, key, part and reason, exit 1 on failure,
and the same broken samples as energon's own `energon lint`."""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest

from energon_arrow.testing.reference import energon_cli
from tests.cli.conftest import BROKEN


def _expected() -> set[tuple[str, str]]:
    return {(f"shards/shard-{s:06d}.tar", f"{s:06d}_{i:06d}") for s, i in BROKEN}


def test_lint_flags_the_samples_energon_flags(broken_root, cli):
    ref = energon_cli("lint", broken_root, check=False)
    # energon prints each failing raw sample (its __key__ and __shard__) with the exception it raised
    ref_keys = re.findall(r"__key__: '([^']+)'\s+__shard__: (\S+)", ref.stdout + ref.stderr)
    assert {(shard, key) for key, shard in ref_keys} == _expected(), ref.stderr[-2000:]

    proc = cli("lint", broken_root, "--json", "--parallel", "2")
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    assert report["samples"] == 36 and report["splits"] == {"train": 24, "val": 12}
    assert report["empty_splits"] == ["test"]
    assert {(f["shard"], f["key"]) for f in report["failures"]} == _expected()
    parts = {f["key"]: (f["part"], f["split"], f["sample_index"]) for f in report["failures"]}
    assert parts == {"000000_000003": ("jpg", "train", 3), "000001_000005": ("json", "train", 5)}
    reasons = {f["part"]: f["reason"] for f in report["failures"]}
    assert "Truncated" in reasons["jpg"] or "truncated" in reasons["jpg"]
    assert reasons["json"].startswith("JSONDecodeError")
    # both decoded the same exception for the JSON part
    assert "Unterminated string" in ref.stderr and "Unterminated string" in reasons["json"]
    assert proc.stderr.strip() == "energon-arrow: error: lint failed: 2 of 36 samples"


def test_lint_text_report_one_process(broken_root, cli):
    proc = cli("lint", broken_root, "--parallel", "1", "--no-progress", "--split-parts", "train")
    assert proc.returncode == 1
    failed = [line for line in proc.stdout.splitlines() if line.startswith("FAILED")]
    assert len(failed) == 2
    assert "shard-000000.tar[3]" in failed[0] and "'000000_000003'" in failed[0] and "part 'jpg'" in failed[0]
    assert "shard-000001.tar[5]" in failed[1] and "part 'json'" in failed[1]
    assert "Checked 24 samples of 1 split(s)" in proc.stdout


def test_lint_clean_dataset_passes(clean_root, cli):
    proc = cli("lint", clean_root, "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert "Checked 12 samples of 2 split(s)" in proc.stdout and ": 0 failed" in proc.stdout
    assert "Skipping empty split part test" in proc.stdout


def test_lint_reports_tar_index_mismatch(clean_root, tmp_path, cli):
    root = str(tmp_path / "ds")
    shutil.copytree(clean_root, root)
    idx = os.path.join(root, "shards", "shard-000001.tar.idx")
    with open(idx, "r+b") as f:
        f.truncate(os.path.getsize(idx) - 8)
    os.utime(idx, (0, 0))
    proc = cli("lint", root, "--json")
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    assert report["failed"] == 0
    assert report["index_mismatches"] == [
        {"shard": "shards/shard-000001.tar", "info_samples": 6, "idx_samples": 5}
    ]


def test_lint_errors_are_one_line(tmp_path, cli):
    proc = cli("lint", str(tmp_path / "missing"))
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("energon-arrow: error:") and "missing" in lines[0]


@pytest.mark.s3
def test_lint_and_html_preview_on_s3(s3_root, tmp_path, cli):
    """The same broken samples found on SeaweedFS (threads instead of processes), preview written to S3."""
    from energon_arrow.adapters import open_storage
    from energon_arrow.index.prepare import PrepareOptions, prepare_dataset
    from energon_arrow.meta import field_map_dataset, parse_split_ratio
    from energon_arrow.testing.lint_data import write_lint_webdataset

    url, options = s3_root
    write_lint_webdataset(url, shards=3, samples_per_shard=12, broken=BROKEN, storage_options=options)
    dataset_yaml = field_map_dataset("CaptioningSample", {"image": "jpg", "caption": "json[caption]"})
    prepare_dataset(
        url, PrepareOptions(split_ratio=parse_split_ratio("2,1,0"), dataset_yaml=dataset_yaml), options
    )
    opts = ["--storage-options", json.dumps(options)]
    proc = cli("lint", url, "--json", "--parallel", "2", *opts)
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert {(f["shard"], f["key"]) for f in report["failures"]} == _expected()
    assert {f["part"] for f in report["failures"]} == {"jpg", "json"}
    proc = cli("preview", url, "--html", f"{url}/preview.html", "--samples", "2", *opts)
    assert proc.returncode == 0, proc.stderr
    assert '<img src="data:image/jpeg;base64,' in open_storage(url, options).read_text("preview.html")
