"""Resumable prepare (kill -9 mid-run, then a rerun gives the bytes of an uninterrupted run) and
`--no-energon-index` (no index.sqlite: our loader and `info` work; energon iterates it, its index.sqlite
features fail)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import energon_arrow as ea
from energon_arrow.index.prepare import PrepareOptions, prepare_dataset
from energon_arrow.index.resume import WORK_DIR
from energon_arrow.index.sqlite_writer import DuplicateKeyError
from energon_arrow.meta import parse_split_ratio
from energon_arrow.meta.manifest import MANIFEST_REL, IntegrityError
from energon_arrow.testing.synthetic import shard_bytes, write_webdataset

RATIO = parse_split_ratio("8,1,1")

# prepare with one in-process reader; the process SIGKILLs itself right after the 4th shard's rows are kept
KILLED_PREPARE = textwrap.dedent(
    """
    import json, os, signal, sys
    import energon_arrow.index.workers as workers
    from energon_arrow.index.prepare import PrepareOptions, prepare_dataset
    from energon_arrow.meta import parse_split_ratio

    original, done = workers.index_one, []

    def index_one(*args, **kwargs):
        result = original(*args, **kwargs)
        done.append(args[1])
        if len(done) == 4:
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    workers.index_one = index_one
    options = json.loads(sys.argv[2]) if len(sys.argv) > 2 else None
    prepare_dataset(sys.argv[1], PrepareOptions(split_ratio=parse_split_ratio("8,1,1"), num_workers=1), options)
    """
)


_PER_RUN = {".nv-meta/index.uuid", ".nv-meta/arrow/loader/manifest.json"}


def _published(root: str) -> dict[str, bytes]:
    """Every file of the dataset but the shards: .nv-meta and the .tar.idx files. Left out: index.uuid (random per
    run) and the loader's row-index manifest (it names the side index it was built from by uuid and mtime)."""
    out = {}
    for path in Path(root).rglob("*"):
        rel = str(path.relative_to(root))
        if path.is_file() and not rel.endswith(".tar") and rel not in _PER_RUN:
            out[rel] = path.read_bytes()
    if MANIFEST_REL in out:  # the same but for index.uuid's digest (and so its own)
        manifest = json.loads(out[MANIFEST_REL])
        del manifest["files"][".nv-meta/index.uuid"], manifest["self_sha256"]
        out[MANIFEST_REL] = manifest
    return out


def test_killed_prepare_resumes_to_identical_output(tmp_path):
    killed, clean = str(tmp_path / "killed"), str(tmp_path / "clean")
    write_webdataset(killed, shards=8, samples_per_shard=6, image_bytes=64)
    shutil.copytree(killed, clean)  # copy2: the same mtimes, so the same side index rows
    proc = subprocess.run([sys.executable, "-c", KILLED_PREPARE, killed], capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert not os.path.exists(os.path.join(killed, ".nv-meta", ".info.json"))  # nothing published
    assert len(os.listdir(os.path.join(killed, WORK_DIR))) == 4  # four shards' rows kept for the next run

    resumed = prepare_dataset(killed, PrepareOptions(split_ratio=RATIO, num_workers=2))
    assert (resumed.resumed, resumed.indexed) == (4, 4)
    assert not os.path.exists(os.path.join(killed, WORK_DIR))  # cleaned at the end
    uninterrupted = prepare_dataset(clean, PrepareOptions(split_ratio=RATIO, num_workers=2))
    assert (uninterrupted.resumed, uninterrupted.indexed) == (0, 8)
    assert _published(killed) == _published(clean)
    assert ".nv-meta/index.sqlite" in _published(killed)
    assert ".nv-meta/arrow/summary.parquet" in _published(killed)  # the summary resumes identically too


@pytest.mark.s3
def test_killed_prepare_resumes_on_s3(s3_root):
    from energon_arrow.adapters import open_storage

    url, options = s3_root
    write_webdataset(url, shards=6, samples_per_shard=5, image_bytes=64, storage_options=options)
    proc = subprocess.run([sys.executable, "-c", KILLED_PREPARE, url, json.dumps(options)], capture_output=True,
                          text=True)  # fmt: skip
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    storage = open_storage(url, options)
    assert not storage.exists(".nv-meta/.info.json")
    assert len(storage.list_files(f"{WORK_DIR}/*.arrow")) == 4
    resumed = prepare_dataset(url, PrepareOptions(split_ratio=RATIO, num_workers=2), options)
    assert (resumed.resumed, resumed.indexed, resumed.samples) == (4, 2, 30)
    assert not storage.list_files(f"{WORK_DIR}/*") and resumed.warnings == []
    names = [
        ".nv-meta/index.sqlite",
        *(f".nv-meta/arrow/{n}.parquet" for n in ("shards", "samples", "parts", "summary")),
    ]
    after_resume = {n: storage.read_bytes(n) for n in names}
    reference = prepare_dataset(url, PrepareOptions(split_ratio=RATIO, num_workers=2, force=True), options)
    assert reference.indexed == 6
    assert {n: storage.read_bytes(n) for n in names} == after_resume  # the bytes of a full re-index


def test_changed_shard_is_not_resumed(tmp_path):
    root = str(tmp_path / "ds")
    write_webdataset(root, shards=4, samples_per_shard=5, image_bytes=64)
    proc = subprocess.run([sys.executable, "-c", KILLED_PREPARE, root], capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    # shard 0 was indexed by the killed run; it changes (other size) before the rerun
    with open(os.path.join(root, "shards", "shard-000000.tar"), "wb") as f:
        f.write(shard_bytes(0, 3, 64))
    result = prepare_dataset(root, PrepareOptions(split_ratio=RATIO, num_workers=1))
    assert (result.resumed, result.indexed) == (3, 1)
    assert result.samples == 3 + 3 * 5


def test_force_ignores_kept_rows(tmp_path):
    root = str(tmp_path / "ds")
    write_webdataset(root, shards=4, samples_per_shard=5, image_bytes=64)
    subprocess.run([sys.executable, "-c", KILLED_PREPARE, root], capture_output=True)
    result = prepare_dataset(root, PrepareOptions(split_ratio=RATIO, num_workers=1, force=True))
    assert (result.resumed, result.indexed) == (0, 4)
    assert not os.path.exists(os.path.join(root, WORK_DIR))


@pytest.mark.parametrize("name", ["samples", "shards"])
def test_unreadable_previous_side_index_is_rebuilt(tmp_path, name):
    """A 0-byte side-index file (what a publish killed on an object store left in CI) is not a previous index to
    reuse: the next prepare indexes every shard and publishes a readable one."""
    from energon_arrow.query import open_dataset

    root = str(tmp_path / "ds")
    write_webdataset(root, shards=3, samples_per_shard=5, image_bytes=64)
    prepare_dataset(root, PrepareOptions(split_ratio=RATIO, num_workers=1))
    open(os.path.join(root, ".nv-meta", "arrow", f"{name}.parquet"), "wb").close()
    result = prepare_dataset(root, PrepareOptions(split_ratio=RATIO, num_workers=1))
    assert (result.reused, result.indexed) == (0, 3)
    with open_dataset(root) as ds:
        assert ds.sql("SELECT count(*) AS n FROM samples").arrow()["n"][0].as_py() == 15


def test_side_index_of_two_prepares_is_not_reused(tmp_path):
    """A publish cut off on an object store can leave the new shards table beside the previous samples and parts
    files (one PUT per file). Opening such a dataset names the command that completes it, and that prepare does
    not take the new table's shards as indexed: it gave them no rows (CI, test_kill9 S3, 2026-11-26)."""
    from energon_arrow.query import NotPreparedError, open_dataset

    root, reference = str(tmp_path / "ds"), str(tmp_path / "reference")
    arrow = os.path.join(root, ".nv-meta", "arrow")
    write_webdataset(root, shards=2, samples_per_shard=5, image_bytes=64)
    prepare_dataset(root, PrepareOptions(split_ratio=RATIO, num_workers=1))
    old = {n: Path(arrow, f"{n}.parquet").read_bytes() for n in ("samples", "parts")}
    for path in (root, reference):
        write_webdataset(path, shards=4, samples_per_shard=5, image_bytes=64)
    prepare_dataset(root, PrepareOptions(split_ratio=RATIO, num_workers=1))
    for (
        name,
        data,
    ) in old.items():  # the torn set: shards.parquet of the second prepare, the rest of the first
        Path(arrow, f"{name}.parquet").write_bytes(data)
    # the manifest (of the second prepare) names the file that is not its own
    with pytest.raises(
        IntegrityError, match="samples.parquet: is .* bytes, prepare recorded .*energon-arrow prepare"
    ):
        open_dataset(root)
    os.remove(os.path.join(root, MANIFEST_REL))  # without one (an earlier version): the set id tells
    with pytest.raises(NotPreparedError, match="files are of different prepares.*energon-arrow prepare"):
        open_dataset(root)
    result = prepare_dataset(root, PrepareOptions(split_ratio=RATIO, num_workers=1))
    assert (result.reused, result.indexed, result.samples) == (0, 4, 20)
    prepare_dataset(reference, PrepareOptions(split_ratio=RATIO, num_workers=1))
    query = "SELECT shard_id, sample_index, sample_key, byte_offset, byte_size FROM samples"
    with open_dataset(root) as ds, open_dataset(reference) as ref:
        assert ds.sql(query).arrow().equals(ref.sql(query).arrow())


def _keys(root: str) -> list[str]:
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
    loader = ea.get_loader(ea.get_val_dataset(root, split_part="train", worker_config=wc, batch_size=4))
    return sorted(k for batch in loader for k in batch.__key__)


def test_no_energon_index(tmp_path, capsys):
    from energon_arrow.cli.main import main

    root = str(tmp_path / "ds")
    write_webdataset(root, shards=4, samples_per_shard=5, image_bytes=64)
    prepare_dataset(root, PrepareOptions(split_ratio=RATIO))  # with index.sqlite first
    assert os.path.exists(os.path.join(root, ".nv-meta", "index.sqlite"))
    main(["prepare", root, "--non-interactive", "--no-progress", "--split-ratio", "8,1,1", "--no-energon-index",
          "--sample-type", "TextSample", "--field-map", '{"text": "txt"}'])  # fmt: skip
    assert "No index.sqlite (--no-energon-index)" in capsys.readouterr().out
    assert not os.path.exists(os.path.join(root, ".nv-meta", "index.sqlite"))  # the old one is gone too
    assert len(_keys(root)) == 15  # our loader loads it
    main(["info", root, "--json"])
    info = json.loads(capsys.readouterr().out)
    assert info["energon_index"] is False
    main(["info", root])
    assert "energon index (index.sqlite): none" in capsys.readouterr().out
    from megatron.energon import WorkerConfig, get_loader, get_val_dataset
    from megatron.energon.cache.file_store import WebdatasetFileStore
    from megatron.energon.epathlib import EPath

    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)  # energon still iterates it (.tar.idx files) ...
    energon = get_loader(get_val_dataset(root, split_part="train", batch_size=4, worker_config=wc))
    assert sorted(k for batch in energon for k in batch.__key__) == _keys(root)
    with pytest.raises(Exception, match="index.sqlite|unable to open"):  # ... but has no index.sqlite
        WebdatasetFileStore(EPath(root))
    prepare_dataset(root, PrepareOptions(split_ratio=RATIO))  # and back: index.sqlite written again
    assert os.path.exists(os.path.join(root, ".nv-meta", "index.sqlite"))
    main(["info", root, "--json"])
    assert json.loads(capsys.readouterr().out)["energon_index"] is True


def test_no_energon_index_still_refuses_duplicate_keys(tmp_path):
    root = str(tmp_path / "ds")
    write_webdataset(root, shards=3, samples_per_shard=5, image_bytes=64)
    with open(os.path.join(root, "shards", "zz-dup.tar"), "wb") as f:
        f.write(shard_bytes(1, 5, 64))  # the keys of shard 1
    with pytest.raises(DuplicateKeyError, match="shard-000001.tar.*zz-dup.tar"):
        prepare_dataset(root, PrepareOptions(split_ratio=RATIO, energon_index=False))
    assert not os.path.exists(os.path.join(root, ".nv-meta", ".info.json"))


def test_no_energon_index_refused_with_tar_index_only(tmp_path):
    from energon_arrow.cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(["prepare", str(tmp_path), "--tar-index-only", "--no-energon-index"])
    assert exc.value.code == 2
