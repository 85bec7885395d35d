"""`energon-arrow query` and `info`: formats, --output, one-line errors with a non-zero exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from energon_arrow.cli.main import main


def run(*args):
    return subprocess.run([sys.executable, "-m", "energon_arrow", *args], capture_output=True, text=True)


def test_query_table_default(energon_ds, cli):
    code, out, _ = cli("query", energon_ds, "SELECT part_name, parts FROM part_types")
    assert code == 0
    lines = out.decode().splitlines()
    assert lines[0].split() == ["part_name", "parts"] and lines[-1] == "(3 rows)"
    assert any(line.split() == ["jpg", "48"] for line in lines)


@pytest.fixture
def cli(energon_ds, capsysbinary):
    def call(*args):
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code or 0
        captured = capsysbinary.readouterr()
        return code, captured.out, captured.err.decode()

    return call


def test_query_csv_json(energon_ds, cli):
    code, out, _ = cli(
        "query",
        energon_ds,
        "SELECT shard_id, sum(byte_size) AS b FROM samples GROUP BY 1 ORDER BY 1",
        "--format",
        "csv",
    )
    assert code == 0
    lines = out.decode().splitlines()
    assert lines[0] == '"shard_id","b"' and len(lines) == 5 and lines[1].startswith("0,")
    code, out, _ = cli(
        "query", energon_ds, "SELECT sample_key FROM samples ORDER BY 1 LIMIT 2", "--format", "json"
    )
    assert json.loads(out) == [{"sample_key": "000000_000000"}, {"sample_key": "000000_000001"}]


@pytest.mark.parametrize("fmt", ["parquet", "arrow", "csv"])
def test_query_output_file(energon_ds, cli, tmp_path, fmt):
    target = str(tmp_path / "out" / f"result.{fmt}")
    code, _, err = cli(
        "query", energon_ds, "SELECT * FROM split_samples", "--format", fmt, "--output", target
    )
    assert code == 0 and "wrote 48 rows" in err
    if fmt == "parquet":
        table = pq.read_table(target)
    elif fmt == "arrow":
        table = pa.ipc.open_file(target).read_all()
    else:
        table = None
        with open(target) as f:
            assert f.read().count("\n") == 49
    if table is not None:
        assert table.num_rows == 48 and "sample_key" in table.column_names
    assert [n for n in os.listdir(tmp_path / "out")] == [f"result.{fmt}"]


def test_query_errors_are_one_line(energon_ds):
    for sql, needle in [
        ("DROP VIEW samples", "refused DROP statement"),
        ("SELECT * FROM nope", "available views:"),
        ("SELECT bogus FROM shards", "shards(shard_id, path, sample_count"),
        ("SELEKT 1", "malformed SQL"),
    ]:
        done = run("query", energon_ds, sql)
        assert done.returncode != 0 and needle in done.stderr
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_query_not_prepared(tmp_path):
    done = run("query", str(tmp_path), "SELECT 1")
    assert done.returncode != 0 and "energon-arrow prepare" in done.stderr and done.stderr.count("\n") == 1


def test_info_text_and_json(energon_ds, cli):
    code, out, _ = cli("info", energon_ds)
    text = out.decode()
    assert code == 0
    assert "(48 samples," in text and "in 4 shards)" in text
    assert "Sample Type: megatron.energon.TextSample" in text
    assert "`train`: 75%, 36 samples in 3 shards" in text and "`val`: 25%, 12 samples in 1 shards" in text
    assert "`jpg`: 48 parts in 48 samples" in text
    code, out, _ = cli("info", energon_ds, "--json")
    info = json.loads(out)
    assert info["samples"] == 48 and info["shards"] == 4
    assert info["bytes"] == sum(os.path.getsize(f"{energon_ds}/shards/shard-{i:06d}.tar") for i in range(4))
    assert [s["name"] for s in info["splits"]] == ["train", "val", "test"]
    assert {p["part_name"] for p in info["part_types"]} == {"jpg", "txt", "json"}


@pytest.mark.conformance
def test_info_matches_energon_info(energon_ds, cli):
    ours = cli("info", energon_ds)[1].decode()
    done = subprocess.run(
        [sys.executable, "-c", "from megatron.energon.cli.main import main; main()", "info", energon_ds],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    theirs = [line for line in done.stdout.splitlines() if line.strip()]
    header = theirs[0].replace(f"`{energon_ds}`", "")
    assert header.split("(")[1] == ours.splitlines()[0].split("(")[1]
    for line in theirs:
        if line.strip().startswith("* `"):
            assert line in ours
