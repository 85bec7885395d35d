"""Read-only commands never write to the dataset's storage: `info`, `query`, `lint` and `preview` on a dataset
energon prepared (no Parquet side index: converted in memory) with a split that excludes samples (resolved in
memory), and `info` on a side index without its summary (computed in memory) leave every file byte-for-byte as
it was, on a local folder and on S3."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from energon_arrow.adapters import open_storage
from energon_arrow.cli.main import cli
from tests.query.conftest import write_split
from tests.query.test_s3 import upload

SPLIT = """split_parts:
  train:
    - shards/shard-00000{0..2}.tar
  val:
    - shards/shard-000003.tar
exclude:
  - shards/shard-000000.tar/000000_000001
"""
COMMANDS = [
    ["info"],
    ["query", "{ds}", "SELECT count(*) FROM split_samples"],
    ["lint"],
    ["preview", "--samples", "2"],
]


def snapshot(url: str, options: dict) -> dict[str, bytes]:
    store = open_storage(url, options)
    return {f: store.read_bytes(f) for f in store.list_files("**/*")}


def run_all(url: str, options: dict) -> None:
    flags = ["--storage-options", __import__("json").dumps(options)] if options else []
    for command in COMMANDS:
        args = [a.format(ds=url) for a in command] if "{ds}" in command[1:] else [*command, url]
        got = CliRunner().invoke(cli, [args[0], *flags, *args[1:]])
        assert got.exit_code == 0, (args, got.output, got.exception)
        assert "Traceback" not in got.output


def test_read_only_commands_leave_a_local_dataset_unchanged(energon_ds):
    write_split(energon_ds, SPLIT)
    before = snapshot(energon_ds, {})
    run_all(energon_ds, {})
    assert snapshot(energon_ds, {}) == before
    assert not os.path.exists(f"{energon_ds}/.nv-meta/arrow")


def test_read_only_commands_on_a_read_only_folder(energon_ds):
    write_split(energon_ds, SPLIT)
    before = snapshot(energon_ds, {})
    for dirpath, _, _ in os.walk(energon_ds):
        os.chmod(dirpath, 0o555)
    try:
        run_all(energon_ds, {})
    finally:
        for dirpath, _, _ in os.walk(energon_ds):
            os.chmod(dirpath, 0o755)
    assert snapshot(energon_ds, {}) == before


@pytest.mark.s3
def test_read_only_commands_leave_an_s3_dataset_unchanged(energon_ds, s3_root):
    url, options = s3_root
    write_split(energon_ds, SPLIT)
    upload(energon_ds, url, options)
    before = snapshot(url, options)
    run_all(url, options)
    assert snapshot(url, options) == before


def test_retry_and_timeout_flags_reach_the_storage_options(energon_ds):
    got = CliRunner().invoke(cli, ["info", "--connect-timeout", "1", energon_ds])
    assert "connect_timeout: only for s3://" in str(got.exception)
    assert (
        CliRunner().invoke(cli, ["info", "--retries", "0", "--retry-deadline-s", "2", energon_ds]).exit_code
        == 0
    )
