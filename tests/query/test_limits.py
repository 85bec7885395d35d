"""DuckDB's memory limit, spill folder and threads take effect on a dataset's connection; split resolution with
many exclusions over a synthetic side index (written like prepare writes it) gives energon's rows."""

from __future__ import annotations

import os

import duckdb
import numpy as np
import pytest
import yaml

from energon_arrow.cli.main import main
from energon_arrow.query import QueryError, QueryLimits, open_dataset
from energon_arrow.query.limits import default_memory_limit
from energon_arrow.testing.scale_index import PER_SHARD, write_side_index

# needs more than 64MB (a sort of 3M strings): it succeeds only by spilling
SPILLING_QUERY = (
    "SELECT count(*) AS n, max(k) AS top FROM (SELECT i::VARCHAR || 'abcdefgh' AS k FROM range(3000000) t(i) "
    "ORDER BY k DESC LIMIT 2000000 OFFSET 1)"
)


@pytest.fixture(scope="module")
def scale_ds(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("scale") / "ds")
    write_side_index(root, 20_000, exclusions=2_000)
    return root


def _setting(ds, name: str):
    return ds.sql(f"SELECT current_setting('{name}') AS v").arrow().column("v")[0].as_py()


def test_defaults_are_bounded(scale_ds):
    with open_dataset(scale_ds, verify=False) as ds:
        limit = _setting(ds, "memory_limit")
        assert limit != duckdb.connect().execute("SELECT current_setting('memory_limit')").fetchone()[0]
        assert f"energon-arrow-duckdb-{os.getpid()}" in _setting(ds, "temp_directory")
    assert default_memory_limit().endswith("MiB") and int(default_memory_limit()[:-3]) <= 4096


def test_memory_limit_and_spill_take_effect(scale_ds, tmp_path):
    spill = str(tmp_path / "spill")
    limits = QueryLimits(memory_limit="64MB", temp_directory=spill, threads=1)
    con = duckdb.connect(":memory:")  # the same limit without a spill folder: out of memory
    con.execute("SET memory_limit = '64MB'; SET temp_directory = ''; SET threads = 1")
    try:
        con.sql(SPILLING_QUERY).fetchall()
        needs_spill = False  # DuckDB 1.2 (the declared minimum) runs this sort within 64 MB without spilling
    except duckdb.OutOfMemoryException:
        needs_spill = True
    with open_dataset(scale_ds, verify=False, limits=limits) as ds:
        assert _setting(ds, "threads") == 1
        assert _setting(ds, "temp_directory") == spill
        assert not os.path.exists(spill)  # nothing spilled yet
        row = ds.sql(SPILLING_QUERY).arrow().to_pylist()[0]
        assert row == {"n": 2_000_000, "top": "99abcdefgh"}
        # where the limit needs it, DuckDB spilled there (external access is off for everything else)
        assert os.path.isdir(spill) == needs_spill
        with pytest.raises(QueryError, match="refused SET"):
            ds.sql("SET memory_limit = '10GB'")


def test_environment_and_bad_values(scale_ds, monkeypatch, tmp_path):
    monkeypatch.setenv("ENERGON_ARROW_QUERY_MEMORY_LIMIT", "100MB")
    monkeypatch.setenv("ENERGON_ARROW_QUERY_THREADS", "1")
    with open_dataset(scale_ds, verify=False) as ds:
        assert _setting(ds, "memory_limit") in ("95.3 MiB", "95.3MiB", "100.0 MB")
        assert _setting(ds, "threads") == 1
    with pytest.raises(QueryError, match="memory limit 'lots'"):
        open_dataset(scale_ds, verify=False, limits=QueryLimits(memory_limit="lots"))
    monkeypatch.setenv("ENERGON_ARROW_QUERY_THREADS", "many")
    with pytest.raises(QueryError, match="ENERGON_ARROW_QUERY_THREADS='many'"):
        open_dataset(scale_ds, verify=False)


def test_cli_options(scale_ds, tmp_path, capsysbinary):
    spill = str(tmp_path / "cli-spill")
    main(["query", scale_ds, "--no-verify", "--memory-limit", "64MB", "--temp-directory", spill, "--threads",
          "1", "--format", "csv", SPILLING_QUERY])  # fmt: skip
    assert capsysbinary.readouterr().out.decode().splitlines()[1] == '2000000,"99abcdefgh"'
    assert not os.path.exists(
        spill
    )  # it succeeded within 64MB by spilling; DuckDB removed the folder at close
    main(["info", scale_ds, "--no-verify", "--json", "--memory-limit", "200MB", "--threads", "1"])
    assert b'"samples": 20000' in capsysbinary.readouterr().out


def test_split_with_many_exclusions(scale_ds):
    """The split.yaml (energon's block layout, read by the line reader) gives what the YAML loader gives, and the
    train split is the train shards' samples minus every excluded shard and sample."""
    with open(os.path.join(scale_ds, ".nv-meta", "split.yaml")) as f:
        config = yaml.safe_load(f)
    with open_dataset(scale_ds, verify=False) as ds:
        assert ds.split_config.exclude == config["exclude"]
        train = ds.split("train")
        excluded = ds.sql("SELECT kind, count(*) AS n FROM excluded GROUP BY kind ORDER BY kind").arrow()
    whole = {e for e in config["exclude"] if e.endswith(".tar")}
    samples = {e for e in config["exclude"] if not e.endswith(".tar")}
    assert excluded.to_pylist() == [{"kind": "sample", "n": len(samples)}, {"kind": "shard", "n": len(whole)}]
    expected = [
        f"{p}/{p[len('shards/shard-') : -4]}_{i:06d}"
        for p in config["split_parts"]["train"]
        if p not in whole
        for i in range(PER_SHARD)
    ]
    expected = [e for e in expected if e not in samples]
    got = [
        f"{p}/{k}"
        for p, k in zip(train.column("shard_path").to_pylist(), train.column("sample_key").to_pylist())
    ]
    assert got == expected
    assert np.all(np.diff(train.column("shard_id").to_numpy()) >= 0)
