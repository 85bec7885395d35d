"""Datasets prepared by `energon-arrow prepare`: the query layer reads their Parquet side index as is."""

from __future__ import annotations

import shutil

from energon_arrow.cli.main import main
from energon_arrow.query import StaleIndexError, open_dataset


def prepare(root: str) -> None:
    try:
        main(["prepare", root, "--non-interactive", "--split-ratio", "3,1,0", "--sample-type", "CrudeWebdataset",
              "--no-progress", "--num-workers", "1"])  # fmt: skip
    except SystemExit as exc:
        assert not exc.code


def test_ours_and_energons_index_agree(energon_ds, tmp_path):
    ours_root = str(tmp_path / "ours")
    shutil.copytree(energon_ds, ours_root, ignore=shutil.ignore_patterns(".nv-meta", "*.idx"))
    prepare(ours_root)
    ours = open_dataset(ours_root)
    assert ours.index_source == "parquet"
    theirs = open_dataset(energon_ds)
    for sql in (
        "SELECT * FROM samples ORDER BY shard_id, sample_index",
        "SELECT shard_id, sample_index, part_name::VARCHAR, content_offset, content_size FROM parts "
        "ORDER BY ALL",
        "SELECT path, sample_count, size, data_end FROM shards ORDER BY shard_id",
        "SELECT * FROM split_samples ORDER BY ALL",
    ):
        assert ours.sql(sql).rows() == theirs.sql(sql).rows()
    assert ours.split("train") == theirs.split("train")


def test_changed_shard_after_our_prepare(energon_ds, tmp_path):
    root = str(tmp_path / "ours")
    shutil.copytree(energon_ds, root, ignore=shutil.ignore_patterns(".nv-meta", "*.idx"))
    prepare(root)
    open_dataset(root)
    with open(f"{root}/shards/shard-000000.tar", "ab") as f:
        f.write(b"\0" * 512)
    try:
        open_dataset(root)
    except StaleIndexError as exc:
        assert "shard-000000.tar" in str(exc) and f"energon-arrow prepare {root}" in str(exc)
    else:
        raise AssertionError("stale shard not detected")
    prepare(root)  # incremental prepare refreshes the index
    assert open_dataset(root).sql("SELECT count(*) FROM samples").scalar() == 48
