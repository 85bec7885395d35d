import json
import os
import uuid

import pytest
import yaml
from click.testing import CliRunner

from energon_arrow.cli import prepare as prepare_cli
from energon_arrow.testing.synthetic import shard_bytes, write_webdataset


@pytest.fixture
def cli(cli):
    """Run `energon-arrow prepare ARGS` in-process (the suite's `cli` fixture with the subcommand)."""
    return lambda *args: cli("prepare", *args)


def test_cli_json_summary_and_dataset_yaml(tmp_path, cli):
    root = str(tmp_path / "ds")
    write_webdataset(root, shards=3, samples_per_shard=4, image_bytes=32)
    fm = '{"image": "jpg", "caption": "txt"}'
    proc = cli(
        root,
        "--non-interactive",
        "--split-ratio",
        "1,1,1",
        "--json",
        "--sample-type",
        "CaptioningSample",
        "--field-map",
        fm,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["samples"] == 12 and summary["splits"] == {"train": 1, "val": 1, "test": 1}
    with open(os.path.join(root, ".nv-meta", "dataset.yaml")) as f:
        assert yaml.safe_load(f)["field_map"] == {"image": "jpg", "caption": "txt"}
    proc = cli(
        root, "--non-interactive", "--split-ratio", "1,1,1", "--sample-type", "TextSample", "--no-progress"
    )
    assert proc.returncode == 0 and "0 indexed, 3 unchanged" in proc.stdout
    assert os.path.exists(os.path.join(root, ".nv-meta", "sample_loader.py"))


def test_cli_errors_are_one_line(tmp_path, cli):
    root = str(tmp_path / "ds")
    write_webdataset(root, shards=2, samples_per_shard=3, image_bytes=32)
    with open(os.path.join(root, "shards", "bad.tar"), "wb") as f:
        f.write(shard_bytes(5, 3, 64, key_prefix="b")[:2000])
    cases = [
        (["--split-ratio", "8,1,1"], "bad.tar"),
        (["--split-ratio", "8,1,1", "--exclude", "("], "--exclude"),
        (["--split-ratio", "8,1"], "--split-ratio"),
        (["--split-ratio", "8,1,1", "--sample-type", "NoSuchSample"], "unknown sample type"),
        ([], "--split-ratio is required in non-interactive mode"),
        (["--split-parts", "train:("], "invalid regex"),
    ]
    for args, needle in cases:
        proc = cli(root, "--non-interactive", "--no-progress", *args)
        assert proc.returncode != 0, args
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0] and "Traceback" not in proc.stderr, (args, proc.stderr)
    proc = cli(root, "--non-interactive", "--split-ratio", "8,1,1", "--skip-bad-shards", "--no-progress")
    assert proc.returncode == 0 and "skipped bad shard" in proc.stderr and "bad.tar" in proc.stderr


def test_interactive_questions_in_energon_order(tmp_path):
    root = str(tmp_path / "ds")
    write_webdataset(root, shards=2, samples_per_shard=3, image_bytes=32)
    from energon_arrow.cli.prepare_ui import SAMPLE_TYPES_FOR_PROMPT

    names = list(SAMPLE_TYPES_FOR_PROMPT)
    answers = ["8,1,1", "y", str(names.index("CaptioningSample")), "y", "jpg", "txt"]
    result = CliRunner().invoke(prepare_cli.command, [root, "--no-progress"], input="\n".join(answers) + "\n")
    assert result.exit_code == 0, result.output
    out = result.output
    assert (
        out.index("train/val/test split")
        < out.index("Part types found")
        < out.index("sample types are available")
    )
    with open(os.path.join(root, ".nv-meta", "dataset.yaml")) as f:
        assert yaml.safe_load(f)["field_map"] == {"image": "jpg", "caption": "txt"}
    again = CliRunner().invoke(prepare_cli.command, [root, "--no-progress"], input="n\n")
    assert again.exit_code == 0 and "already been prepared" in again.output


@pytest.mark.s3
def test_unwritable_destination_fails_cleanly(s3_iam_server, cli):
    """Credentials that may read the shards but not write: one-line error naming the URL, nothing written."""
    from energon_arrow.testing.seaweedfs import ACCESS_KEY, READER_KEY, READER_SECRET, SECRET_KEY

    # the bucket the adapter tests use: every new bucket takes SeaweedFS volume slots, which are few
    bucket = s3_iam_server.create_bucket("ea-iam")
    prefix = f"ro-{uuid.uuid4().hex[:8]}"
    root = f"s3://{bucket}/{prefix}"
    admin = {"endpoint_url": s3_iam_server.endpoint_url, "key": ACCESS_KEY, "secret": SECRET_KEY}
    write_webdataset(root, shards=2, samples_per_shard=5, storage_options=admin)
    reader = {"endpoint_url": s3_iam_server.endpoint_url, "key": READER_KEY, "secret": READER_SECRET}
    result = cli(
        root,
        "--non-interactive",
        "--no-progress",
        "--split-ratio",
        "1,0,0",
        "--storage-options",
        json.dumps(reader),
    )
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("energon-arrow: error:"), result.stderr
    assert f"{root}/" in lines[0] and "denied" in lines[0].lower()  # the first write (a work entry)
    assert READER_SECRET not in result.stderr
    listed = s3_iam_server.client().list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/")
    assert sorted(o["Key"] for o in listed["Contents"]) == [
        f"{prefix}/shards/shard-000000.tar",
        f"{prefix}/shards/shard-000001.tar",
    ]


def test_cli_progress_bar_reports_shards_and_samples(tmp_path, cli):
    root = str(tmp_path / "ds")
    write_webdataset(root, shards=3, samples_per_shard=4, image_bytes=32)
    proc = cli(root, "--non-interactive", "--split-ratio", "1,1,1")  # progress is on by default
    assert proc.returncode == 0, proc.stderr
    assert "3/3 shards" in proc.stderr and "samples/s" in proc.stderr
