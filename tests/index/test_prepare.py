import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from energon_arrow.adapters import open_storage
from energon_arrow.index.prepare import PrepareOptions, prepare_dataset
from energon_arrow.index.schema import PARTS_SCHEMA, SAMPLES_SCHEMA, SHARDS_SCHEMA
from energon_arrow.index.side_index import read_side_index
from energon_arrow.index.sqlite_writer import DuplicateKeyError
from energon_arrow.meta import MetaError, field_map_dataset, parse_split_parts, parse_split_ratio, read_info
from energon_arrow.tar import TarFormatError
from energon_arrow.testing.synthetic import shard_bytes, write_webdataset

RATIO = parse_split_ratio("8,1,1")


def _meta(root: str) -> dict[str, bytes]:
    """The published .nv-meta files (not the work folder an interrupted prepare leaves for the next run)."""
    meta = os.path.join(root, ".nv-meta")
    out = {}
    for dirpath, _, names in os.walk(meta):
        if os.path.relpath(dirpath, meta).startswith(".prepare-work"):
            continue
        for n in names:
            p = os.path.join(dirpath, n)
            out[os.path.relpath(p, meta)] = Path(p).read_bytes()
    return out


def _rows(root):
    with sqlite3.connect(os.path.join(root, ".nv-meta", "index.sqlite")) as db:
        return sorted(db.execute("SELECT * FROM samples")), sorted(db.execute("SELECT * FROM sample_parts"))


@pytest.fixture
def dataset(tmp_path):
    root = str(tmp_path / "ds")
    write_webdataset(root, shards=5, samples_per_shard=7, image_bytes=100)
    return root


def test_prepare_writes_everything(dataset):
    result = prepare_dataset(dataset, PrepareOptions(split_ratio=RATIO, num_workers=2))
    assert (result.shards, result.samples, result.parts) == (5, 35, 105)
    assert result.part_types == {"jpg": 35, "json": 35, "txt": 35}
    meta = _meta(dataset)
    assert {".info.json", "split.yaml", "index.sqlite", "index.uuid"} <= set(meta)
    assert len(meta["index.uuid"]) == 36
    side = read_side_index(open_storage(dataset))
    assert side.shards.schema.equals(SHARDS_SCHEMA) and side.samples.schema.equals(SAMPLES_SCHEMA)
    assert side.parts.schema.equals(PARTS_SCHEMA)
    samples, parts = _rows(dataset)
    assert len(samples) == side.samples.num_rows == 35 and len(parts) == side.parts.num_rows == 105
    assert sorted(side.samples.column("sample_key").to_pylist()) == sorted(r[1] for r in samples)
    info = json.loads(meta[".info.json"])
    assert side.shards.column("path").to_pylist() == list(info["shard_counts"])
    for shard in info["shard_counts"]:
        assert os.path.getsize(os.path.join(dataset, shard + ".idx")) == 8 * (7 + 1)


def test_incremental_reindexes_only_changed_shards(dataset):
    prepare_dataset(dataset, PrepareOptions(split_ratio=RATIO))
    before = _rows(dataset)
    again = prepare_dataset(dataset, PrepareOptions(split_ratio=RATIO))
    assert (again.indexed, again.reused) == (0, 5) and _rows(dataset) == before
    shards = sorted(read_info(open_storage(dataset)).shard_counts)
    with open(os.path.join(dataset, shards[1]), "wb") as f:
        f.write(shard_bytes(1, 9, 50, seed=5, key_prefix="new"))
    os.remove(os.path.join(dataset, shards[3]))
    changed = prepare_dataset(dataset, PrepareOptions(split_ratio=RATIO))
    assert (changed.indexed, changed.reused, changed.removed) == (1, 3, 1)
    counts = read_info(open_storage(dataset)).shard_counts
    assert counts[shards[1]] == 9 and shards[3] not in counts
    fresh = os.path.join(os.path.dirname(dataset), "copy")
    shutil.copytree(os.path.join(dataset, "shards"), os.path.join(fresh, "shards"))
    prepare_dataset(fresh, PrepareOptions(split_ratio=RATIO, force=True))
    assert _rows(fresh) == _rows(dataset)  # the incremental index equals a full rebuild


def test_force_reindexes_all(dataset):
    prepare_dataset(dataset, PrepareOptions(split_ratio=RATIO))
    result = prepare_dataset(dataset, PrepareOptions(split_ratio=RATIO, force=True))
    assert (result.indexed, result.reused) == (5, 0)


def test_bad_shard_fails_and_keeps_old_index(dataset):
    prepare_dataset(dataset, PrepareOptions(split_ratio=RATIO))
    old = _meta(dataset)
    good = shard_bytes(9, 3, 50, key_prefix="z")
    with open(os.path.join(dataset, "shards", "zz-truncated.tar"), "wb") as f:
        f.write(good[:1500])
    with pytest.raises(TarFormatError, match="zz-truncated.tar.*truncated"):
        prepare_dataset(dataset, PrepareOptions(split_ratio=RATIO))
    assert _meta(dataset) == old
    assert not [n for n in os.listdir(dataset) if n.startswith(".nv-meta.")]
    result = prepare_dataset(dataset, PrepareOptions(split_ratio=RATIO, skip_bad_shards=True))
    assert [b.path for b in result.bad_shards] == ["shards/zz-truncated.tar"] and result.shards == 5


def test_interrupt_keeps_old_index(dataset, monkeypatch):
    import energon_arrow.index.prepare as prep

    prepare_dataset(dataset, PrepareOptions(split_ratio=RATIO))
    old = _meta(dataset)
    with open(os.path.join(dataset, "shards", "zz-new.tar"), "wb") as f:
        f.write(shard_bytes(9, 3, 50, key_prefix="z"))

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(prep, "split_yaml_bytes", interrupted)  # Ctrl-C after indexing, before publishing
    with pytest.raises(KeyboardInterrupt):
        prepare_dataset(dataset, PrepareOptions(split_ratio=RATIO, force=True))
    assert _meta(dataset) == old
    # every shard's rows wait in the work folder for the next run
    assert len(os.listdir(os.path.join(dataset, ".nv-meta", ".prepare-work"))) == 6
    assert sorted(os.listdir(dataset)) == [".nv-meta", "shards"]  # no build folder left behind


def test_sigkilled_prepare_leaves_old_index_and_the_next_run_removes_its_build_folder(dataset):
    import signal
    import subprocess
    import sys
    import time

    prepare_dataset(dataset, PrepareOptions(split_ratio=RATIO))
    old = _meta(dataset)
    # a prepare that hangs after indexing, before publishing (its build folder exists), then gets SIGKILLed
    code = (
        "import time\n"
        "import energon_arrow.index.prepare as prep\n"
        "from energon_arrow.meta import parse_split_ratio\n"
        "prep.split_yaml_bytes = lambda *a, **k: time.sleep(3600)\n"
        f"prep.prepare_dataset({dataset!r}, prep.PrepareOptions(split_ratio=parse_split_ratio('8,1,1'), force=True))\n"
    )
    # its own process group, so that the kill takes its prepare workers too (no orphans left sleeping)
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=os.getcwd(), start_new_session=True)
    deadline = time.time() + 60
    while not [n for n in os.listdir(dataset) if n.startswith(".nv-meta.build-")]:
        assert time.time() < deadline and proc.poll() is None
        time.sleep(0.05)
    time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    leftover = [n for n in os.listdir(dataset) if n.startswith(".nv-meta.build-")]
    assert len(leftover) == 1 and f"-{proc.pid}-" in leftover[0]
    assert _meta(dataset) == old  # the old index is intact
    prepare_dataset(dataset, PrepareOptions(split_ratio=RATIO))  # the next run removes the dead run's folder
    assert sorted(os.listdir(dataset)) == [".nv-meta", "shards"]


def test_build_folders_of_live_processes_are_kept(dataset):
    import socket

    from energon_arrow.index.build_dir import remove_abandoned_builds

    live = os.path.join(dataset, f".nv-meta.build-{socket.gethostname()}-{os.getpid()}-abcd1234")
    os.makedirs(live)
    assert remove_abandoned_builds(dataset) == []
    assert os.path.isdir(live)


def test_gzip_shard_is_refused(dataset):
    import gzip

    with open(os.path.join(dataset, "shards", "x.tgz"), "wb") as f:
        f.write(gzip.compress(shard_bytes(9, 2, 50, key_prefix="g")))
    with pytest.raises(TarFormatError, match="x.tgz.*gzip"):
        prepare_dataset(dataset, PrepareOptions(split_ratio=RATIO))


def test_duplicate_keys_across_shards(dataset):
    dup = shard_bytes(0, 7, 100)  # the same keys as shard 0
    with open(os.path.join(dataset, "shards", "a-dup.tar"), "wb") as f:
        f.write(dup)
    with pytest.raises(DuplicateKeyError, match="duplicate sample key"):
        prepare_dataset(dataset, PrepareOptions(split_ratio=RATIO))
    assert _meta(dataset) == {}  # nothing published (the indexed shards wait in the work folder)
    result = prepare_dataset(dataset, PrepareOptions(split_ratio=RATIO, skip_bad_shards=True))
    # the failed run kept the shards its workers had indexed before the duplicate stopped it (timing decides how
    # many); this run takes those and indexes the rest
    assert result.resumed >= 1 and result.resumed + result.indexed == 6
    assert [b.path for b in result.bad_shards] == ["shards/shard-000000.tar"]  # a-dup.tar comes first
    info = read_info(open_storage(dataset))
    assert "shards/shard-000000.tar" not in info.shard_counts and len(info.shard_counts) == 5
    side = read_side_index(open_storage(dataset))
    assert side.shards.column("shard_id").to_pylist() == list(range(5))
    with sqlite3.connect(os.path.join(dataset, ".nv-meta", "index.sqlite")) as db:
        ids = [r[0] for r in db.execute("SELECT DISTINCT tar_file_id FROM samples ORDER BY 1")]
    assert ids == list(range(5))
    assert sorted(side.samples.column("shard_id").unique().to_pylist()) == ids


def test_split_and_dataset_yaml_errors(dataset):
    with pytest.raises(MetaError, match="no shard matches val"):
        prepare_dataset(
            dataset, PrepareOptions(split_parts=parse_split_parts(["train:shards", "val:nothing"]))
        )
    with pytest.raises(MetaError, match="'caption' maps to part 'png'"):
        prepare_dataset(
            dataset,
            PrepareOptions(
                split_ratio=RATIO,
                dataset_yaml=field_map_dataset("CaptioningSample", {"image": "jpg", "caption": "png"}),
            ),
        )
    assert _meta(dataset) == {}  # nothing published
    with pytest.raises(MetaError, match="no .tar shards"):
        prepare_dataset(dataset, PrepareOptions(split_ratio=RATIO, exclude="shard"))


def test_parquet_row_order(dataset):
    prepare_dataset(dataset, PrepareOptions(split_ratio=RATIO, num_workers=3))
    meta = os.path.join(dataset, ".nv-meta", "arrow")
    samples = pq.read_table(os.path.join(meta, "samples.parquet")).to_pydict()
    pairs = list(zip(samples["shard_id"], samples["sample_index"]))
    assert pairs == sorted(pairs)
    parts = pq.read_table(os.path.join(meta, "parts.parquet")).to_pydict()
    triples = list(zip(parts["shard_id"], parts["sample_index"], parts["content_offset"]))
    assert triples == sorted(triples)


def test_row_index_and_side_index_the_same_in_one_group_or_many(dataset, monkeypatch):
    """One group: the row index is built from the tables in memory; several: from the files read back."""
    from energon_arrow.index import side_index
    from energon_arrow.loader.row_index import LOCAL_REL

    def outputs() -> dict:
        meta = _meta(dataset)
        tables = {
            n: pq.read_table(os.path.join(dataset, ".nv-meta", "arrow", f"{n}.parquet"))
            for n in ("samples", "parts")
        }
        rows = {
            k: v for k, v in meta.items() if k.startswith(LOCAL_REL.split("/", 1)[1]) and "manifest" not in k
        }
        return {**{n: t.to_pydict() for n, t in tables.items()}, **rows}

    prepare_dataset(dataset, PrepareOptions(split_ratio=RATIO, num_workers=2))
    one = outputs()
    monkeypatch.setattr(side_index, "_ROW_GROUP_ROWS", 20)  # 21 parts a shard: a group per shard
    prepare_dataset(dataset, PrepareOptions(split_ratio=RATIO, num_workers=2, force=True))
    assert pq.ParquetFile(os.path.join(dataset, ".nv-meta", "arrow", "parts.parquet")).num_row_groups > 1
    many = outputs()
    assert len([k for k in one if k.endswith(".npy")]) == 9 and one == many  # 3 parts: offsets and CRCs each


@pytest.mark.s3
def test_prepare_on_s3_matches_local(s3_root, tmp_path):
    url, options = s3_root
    local = str(tmp_path / "local")
    write_webdataset(local, shards=3, samples_per_shard=5, image_bytes=64)
    write_webdataset(url, shards=3, samples_per_shard=5, image_bytes=64, storage_options=options)
    prepare_dataset(local, PrepareOptions(split_ratio=RATIO))
    result = prepare_dataset(url, PrepareOptions(split_ratio=RATIO, num_workers=2), storage_options=options)
    assert result.samples == 15
    store = open_storage(url, options)
    assert (
        store.read_bytes(".nv-meta/.info.json")
        == Path(os.path.join(local, ".nv-meta", ".info.json")).read_bytes()
    )
    db_path = tmp_path / "s3.sqlite"
    db_path.write_bytes(store.read_bytes(".nv-meta/index.sqlite"))
    with sqlite3.connect(db_path) as db:
        assert sorted(db.execute("SELECT * FROM sample_parts")) == _rows(local)[1]
    shard = read_info(store).shards[0]
    assert store.read_bytes(shard + ".idx") == Path(os.path.join(local, shard + ".idx")).read_bytes()
    again = prepare_dataset(url, PrepareOptions(split_ratio=RATIO), storage_options=options)
    assert again.reused == 3
    before = {
        name: store.read_bytes(f".nv-meta/{name}") for name in ("index.sqlite", "index.uuid", "split.yaml")
    }
    with pytest.raises(MetaError, match="'caption' maps to part 'png'"):  # fails before any upload
        prepare_dataset(
            url,
            PrepareOptions(
                split_ratio=parse_split_ratio("1,1,0"),
                force=True,
                dataset_yaml=field_map_dataset("CaptioningSample", {"image": "jpg", "caption": "png"}),
            ),
            storage_options=options,
        )
    assert {name: store.read_bytes(f".nv-meta/{name}") for name in before} == before


def test_prepare_with_tmp_path_removes_builds_of_dead_processes(dataset, tmp_path):
    import socket

    tmp = tmp_path / "builds"
    dead = tmp / f"energon-arrow-prepare-{socket.gethostname()}-999999999-abcd1234"  # no such process
    dead.mkdir(parents=True)
    (dead / "index.sqlite").write_bytes(b"half")
    prepare_dataset(dataset, PrepareOptions(split_ratio=RATIO, tmp_path=str(tmp)))
    assert os.listdir(tmp) == []


def test_prepare_cli_imports_neither_pandas_nor_duckdb(dataset):
    """Both cost ~0.5 s of start-up each: prepare (side index, summary, row index, index.sqlite) needs neither
    (`pa.array` of a numpy array imports pandas: tar.arrow.from_numpy is used instead)."""
    code = (
        "import sys\n"
        "from energon_arrow.cli.main import main\n"
        "try:\n"
        f"    main(['prepare', {dataset!r}, '--non-interactive', '--split-ratio', '8,1,1', '--no-progress'])\n"
        "except SystemExit as exc:\n"
        "    assert not exc.code, exc.code\n"
        "print(sorted(m for m in ('pandas', 'duckdb') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"
