"""Query layer vs energon's SQLite paths on a generated 1M-sample index (100k with --quick).

1. index statistics (per-shard sample counts/bytes, per-part-type size statistics): DuckDB over the Parquet side
   index vs the same SQL through sqlite3 on index.sqlite (both on an open connection);
2. resolving the train split with 10,000 sample-level exclusions (open + split): ours vs energon's own exclusion
   filter (`filter_samples_with_excludes`) and split-ordered query on index.sqlite; target: under 1 s;
3. joining the primary's train split with a 1M-part auxiliary dataset by sample key and writing energon's join
   index: `join_datasets` + `join_index_bytes` vs energon's `join_multiple_indices` (identical output bytes);
   plus resolving 1M `<key>.jpg` references with `join_aux` against the same aux index.
"""

from __future__ import annotations

import contextlib
import io
import os
import sqlite3
import tempfile

from benchmarks.harness import Comparison, alternate, timed
from benchmarks.query_data import generate

SHARD_STATS = "SELECT {sid}, count(*), sum(byte_size) FROM samples GROUP BY {sid} ORDER BY {sid}"
PART_STATS = (
    "SELECT part_name, count(*), sum({size}), min({size}), max({size}), avg({size}) FROM {parts} "
    "GROUP BY part_name ORDER BY part_name"
)


def _energon_meta(path: str, split: str):
    from megatron.energon.epathlib import EPath
    from megatron.energon.flavors.webdataset.metadata import WebdatasetMeta
    from megatron.energon.metadataset.join_dataset_loader import JoinedDatasetMetaInfo

    meta = WebdatasetMeta.from_config(EPath(path), split_part=split)
    ids = {name: i for i, name in enumerate(meta.info_shard_files)}
    with open(os.path.join(path, ".nv-meta", "index.uuid")) as f:
        uuid = f.read()
    return JoinedDatasetMetaInfo(
        db_path=EPath(os.path.join(path, ".nv-meta", "index.sqlite")),
        uuid=uuid,
        excludes=list(meta.sample_excludes),
        shard_name_to_info_idx=ids,
        split_part_oder=[ids[name] for name in meta.split_part_files],
        nonmatch="error",
    )


def _energon_split(path: str) -> int:
    """energon's exclusion filter and split order over index.sqlite (as its join index build runs them)."""
    from megatron.energon.metadataset.join_dataset_loader import filter_samples_with_excludes

    mi = _energon_meta(path, "train")
    con = sqlite3.connect(f"file:{mi.db_path}?mode=ro", uri=True)
    try:
        filter_samples_with_excludes(con, "main", mi)
        con.execute("CREATE TEMP TABLE o (tar_file_id INTEGER PRIMARY KEY, split_index INTEGER)")
        con.executemany("INSERT INTO o VALUES (?, ?)", ((n, i) for i, n in enumerate(mi.split_part_oder)))
        rows = con.execute(
            "SELECT f.tar_file_id, f.sample_index, f.sample_key, f.byte_offset, f.byte_size FROM main_filtered f "
            "JOIN o ON o.tar_file_id = f.tar_file_id ORDER BY o.split_index, f.sample_index"
        ).fetchall()
    finally:
        con.close()
    return len(rows)


def _energon_join(primary: str, aux: str, out: str) -> None:
    from megatron.energon.epathlib import EPath
    from megatron.energon.metadataset.join_dataset_loader import join_multiple_indices

    infos = [_energon_meta(primary, "train"), _energon_meta(aux, "train")]
    infos[1].nonmatch = "skip"
    with contextlib.redirect_stdout(io.StringIO()):
        join_multiple_indices(infos, EPath(out))


def run(args) -> list[Comparison]:
    from energon_arrow.query import open_dataset
    from energon_arrow.query.join import JoinMember, join_datasets, join_index_bytes

    n = 100_000 if args.quick else 1_000_000
    repeats = max(1, args.repeats)
    root = generate(n)
    primary, aux = os.path.join(root, "primary"), os.path.join(root, "aux")
    notes = {"samples": n, "primary_parts": 3 * n, "aux_parts": n, "exclusions": 10_000}
    out = []

    # 1. statistics
    ds = open_dataset(primary, verify=False)
    con = sqlite3.connect(f"file:{primary}/.nv-meta/index.sqlite?mode=ro", uri=True)
    ours_q = [SHARD_STATS.format(sid="shard_id"), PART_STATS.format(size="content_size", parts="parts")]
    ref_q = [
        SHARD_STATS.format(sid="tar_file_id"),
        PART_STATS.format(size="content_byte_size", parts="sample_parts"),
    ]
    assert [len(ds.sql(q)) for q in ours_q] == [len(con.execute(q).fetchall()) for q in ref_q]
    a, b = alternate(
        lambda: timed(lambda: [ds.sql(q).arrow() for q in ours_q]),
        lambda: timed(lambda: [con.execute(q).fetchall() for q in ref_q]),
        repeats,
    )
    con.close()
    out.append(
        Comparison(
            "per-shard + per-part-type statistics (DuckDB/Parquet vs sqlite3/index.sqlite)",
            "s",
            a,
            b,
            10.0,
            notes,
        )
    )

    # 2. split with 10k sample exclusions, opening included
    expected = _energon_split(primary)
    assert open_dataset(primary, verify=False).split("train").num_rows == expected
    a, b = alternate(
        lambda: timed(lambda: open_dataset(primary, verify=False).split("train")),
        lambda: timed(lambda: _energon_split(primary)),
        repeats,
    )
    split_notes = {**notes, "split_rows": expected, "target_seconds": 1.0, "under_target": max(a) < 1.0}
    out.append(
        Comparison(
            "resolve train split with 10k sample exclusions (open + split)", "s", a, b, None, split_notes
        )
    )

    # 3. join by sample key, writing energon's join index
    with tempfile.TemporaryDirectory(prefix="ea-bench-join-") as tmp:
        ours_path, ref_path = os.path.join(tmp, "ours.bin"), os.path.join(tmp, "energon.bin")

        def ours_join():
            joined = join_datasets(
                {
                    "primary": open_dataset(primary, verify=False),
                    "aux": JoinMember(open_dataset(aux, verify=False), "skip"),
                },
                "train",
            )
            with open(ours_path, "wb") as f:
                f.write(join_index_bytes(joined, ["primary", "aux"]))

        ours_join()
        _energon_join(primary, aux, ref_path)
        with open(ours_path, "rb") as f1, open(ref_path, "rb") as f2:
            identical = f1.read() == f2.read()
        a, b = alternate(
            lambda: timed(ours_join), lambda: timed(lambda: _energon_join(primary, aux, ref_path)), repeats
        )
        out.append(Comparison("join by sample_key -> energon join index (join_datasets vs join_multiple_indices)",
                              "s", a, b, 5.0, {**notes, "identical_join_index": identical}))  # fmt: skip

        def ours_refs():
            p = open_dataset(primary, verify=False)
            res = p.join_aux(
                {"media": open_dataset(aux, verify=False)},
                refs="SELECT shard_id, sample_index, sample_key || '.jpg' AS ref FROM samples",
            )
            return res.summary()

        summary = ours_refs()
        a, b = alternate(
            lambda: timed(ours_refs), lambda: timed(lambda: _energon_join(primary, aux, ref_path)), repeats
        )
        out.append(Comparison(f"resolve {n:,} '<key>.jpg' references against the aux index (join_aux vs energon join index build)",
                              "s", a, b, 5.0, {**notes, "summary": summary}))  # fmt: skip
    return out
