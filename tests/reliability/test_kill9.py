"""kill -9 at seeded random points of prepare (local and S3), preprocess, merge and the Nanoset cache build.

Each scenario has a previous output (state A) and a run that would replace it (state B). The run is started in a
fresh interpreter in its own session; once its imports are done it says "ready", and after a seeded random delay
within the measured length of an uninterrupted run its whole process group gets SIGKILL. After every kill the
output must be A or B, complete and readable (never a half-written file under a published name); after all
kills, one more run must succeed and give exactly the uninterrupted run's output.

`EA_KILL_RUNS=N` kills N times per scenario (default 3; the long run in docs/reliability.md).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import warnings

import numpy as np
import pytest

from energon_arrow.meta.manifest import IntegrityError
from energon_arrow.query.errors import NotPreparedError, StaleIndexError
from energon_arrow.testing.synthetic import write_webdataset

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KILLS = int(os.environ.get("EA_KILL_RUNS") or 3)
STATS: dict[str, dict[str, int]] = {}


def tail(log: str) -> str:
    with open(log, errors="replace") as f:
        return f.read()[-3000:]


def start(code: str, log: str) -> subprocess.Popen:
    prelude = "import sys, time\n"
    script = prelude + code.replace("READY", "print('ready', flush=True); t0 = time.perf_counter()")
    script += "\nprint('done', time.perf_counter() - t0, flush=True)\n"
    with open(log, "ab") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", script],
            stdout=subprocess.PIPE,
            stderr=err,
            env={**os.environ, "PYTHONPATH": ROOT},
            start_new_session=True,
        )
    assert proc.stdout.readline() == b"ready\n", tail(log)
    return proc


def run_clean(code: str, log: str) -> float:
    """Run to the end; the seconds its work took (after the imports)."""
    proc = start(code, log)
    out = proc.stdout.read().decode()
    assert proc.wait() == 0, tail(log)
    proc.stdout.close()
    return float(out.split()[-1])


def run_killed(code: str, log: str, delay: float) -> bool:
    """Start, SIGKILL the whole process group after `delay` s of work; whether it was still running."""
    proc = start(code, log)
    try:
        proc.wait(delay)
        killed = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        killed = True
    proc.stdout.close()
    assert killed or proc.returncode == 0, tail(log)
    return killed


def kill_repeatedly(name: str, code: str, work: float, log: str, check, seed: int) -> None:
    """KILLS seeded kills within [0, 1.1 * work], `check()` after each one; counted in STATS."""
    rng = np.random.default_rng(seed)
    stats = STATS.setdefault(name, {"runs": 0, "killed": 0, "work_s": round(work, 2)})
    for delay in rng.uniform(0, 1.1 * work, size=KILLS):
        stats["runs"] += 1
        stats["killed"] += run_killed(code, log, float(delay))
        check()


@pytest.fixture(scope="module", autouse=True)
def report():
    yield
    print("\nkill -9 runs:", json.dumps(STATS))


# ---- prepare ------------------------------------------------------------------------------------------------
PREPARE = """
from energon_arrow.cli.main import main
args = ["prepare", {url!r}, "--non-interactive", "--split-ratio", "1,0,0", "--sample-type", "TextSample",
        "--field-map", '{{"text": "txt"}}', "--num-workers", "2", "--storage-options", {options!r}]
READY
main(args)
"""


def dataset_rows(url: str, options: dict | None = None):
    from energon_arrow.query import open_dataset

    with open_dataset(url, options) as ds:
        return ds.sql(
            "SELECT shard_id, sample_index, sample_key, byte_offset, byte_size FROM samples"
        ).arrow()


def energon_keys(root: str) -> list[str]:
    """Every sample key of the train split as energon 7.4.1 itself loads it (the reference reads what survived)."""
    from megatron.energon import WorkerConfig, get_loader, get_val_dataset

    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = get_val_dataset(root, split_part="train", batch_size=64, worker_config=wc)
    return sorted(k for batch in get_loader(ds) for k in batch.__key__)


def megatron_documents(prefix: str):
    """(document count, sha of the documents) as megatron-core's IndexedDataset reads them; None where
    megatron-core is not installed (the minimum-versions run)."""
    import importlib.util

    if importlib.util.find_spec("megatron.core") is None:
        return None
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    return documents_digest(IndexedDataset(prefix))


def sqlite_consistent(path: str, expected_samples: int) -> None:
    """index.sqlite is whole (integrity_check) and of the same set as the rest of .nv-meta (the same samples)."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert db.execute("SELECT count(*) FROM samples").fetchone()[0] == expected_samples
    db.close()


def shards(url: str, options: dict, n: int, per: int) -> None:
    write_webdataset(url, shards=n, samples_per_shard=per, image_bytes=64, storage_options=options)


def prepare_scenario(tmp_path, url: str, options: dict, name: str, n: tuple[int, int], per: int):
    """State A prepared from n[0] shards, then n[1] shards written (the first n[0] rewritten, unchanged)."""
    code = PREPARE.format(url=url, options=json.dumps(options))
    log = str(tmp_path / f"{name}.log")
    shards(url, options, n[0], per)
    run_clean(code, log)
    before = dataset_rows(url, options)  # state A
    shards(url, options, n[1], per)
    return code, log, before


def test_kill_prepare_local(tmp_path):
    root = str(tmp_path / "ds")
    code, log, before = prepare_scenario(tmp_path, root, {}, "prepare-local", (3, 6), 150)
    reference = str(tmp_path / "reference")
    shutil.copytree(root, reference)
    work = run_clean(code.replace(repr(root), repr(reference)), log)
    after = dataset_rows(reference)  # state B

    def check():
        rows = dataset_rows(root)
        assert rows.equals(before) or rows.equals(after)
        sqlite_consistent(os.path.join(root, ".nv-meta", "index.sqlite"), rows.num_rows)
        with open(os.path.join(root, ".nv-meta", ".info.json")) as f:
            assert sum(json.load(f)["shard_counts"].values()) == rows.num_rows
        assert not glob.glob(os.path.join(root, ".nv-meta", "*.tmp-*"))  # published names only
        assert energon_keys(root) == sorted(rows.column("sample_key").to_pylist())

    kill_repeatedly("prepare (local)", code, work, log, check, seed=1)
    run_clean(code, log)
    assert dataset_rows(root).equals(after)


@pytest.mark.s3
def test_kill_prepare_s3(tmp_path, s3_root):
    url, options = s3_root
    code, log, before = prepare_scenario(tmp_path, url, options, "prepare-s3", (2, 4), 50)
    reference = url + "-reference"
    code_ref = PREPARE.format(url=reference, options=json.dumps(options))
    shards(reference, options, 4, 50)
    work = run_clean(code_ref, log)
    after = dataset_rows(reference, options)

    def check():
        # an object store has no multi-object transaction: a kill among the last PUTs (the new .nv-meta files, the
        # marker last) can leave files of the new set beside the old ones; open must say so and name the command
        # that completes it (the run after the kills), never return rows of neither state
        try:
            rows = dataset_rows(url, options)
        except (StaleIndexError, NotPreparedError, IntegrityError) as exc:
            # IntegrityError: new files beside the previous manifest (a kill before the manifest's PUT)
            torn = (
                "lists different shards than .nv-meta/.info.json",
                "unreadable side index",
                "differs from what prepare recorded",
                "prepare recorded",
            )
            assert any(t in str(exc) for t in torn) and "energon-arrow prepare" in str(exc), str(exc)
            STATS["prepare (S3)"]["torn"] = STATS["prepare (S3)"].get("torn", 0) + 1
            from energon_arrow.adapters import open_storage

            empty = [f.path for f in open_storage(url, options).scan(".nv-meta/**") if f.size == 0]
            warnings.warn(f"torn S3 publish after a kill: {exc}; empty objects: {empty}", stacklevel=1)
            return
        assert rows.equals(before) or rows.equals(after)

    kill_repeatedly("prepare (S3)", code, work, log, check, seed=2)
    run_clean(code, log)
    assert dataset_rows(url, options).equals(after)


# ---- preprocess and merge -----------------------------------------------------------------------------------
PREPROCESS = """
from energon_arrow.cli.main import main
READY
main(["preprocess", "--input", {input!r}, "--output-prefix", {prefix!r}, "--tokenizer", "byte", "--append-eod",
      "--workers", "2"{extra}])
"""
MERGE = """
from energon_arrow.cli.main import main
READY
main(["merge", {inputs}, "--output-prefix", {prefix!r}])
"""


def documents_digest(documents) -> tuple[int, str]:
    """(document count, sha256 of the documents' token bytes) of an indexable token dataset."""
    import hashlib

    docs = [np.asarray(documents[i]).tobytes() for i in range(len(documents))]
    return len(docs), hashlib.sha256(b"|".join(docs)).hexdigest()


def token_state(prefix: str):
    """(document count, sha of the documents) of a complete token dataset, read by our reader."""
    from energon_arrow.tokens.indexed import IndexedTokens

    return documents_digest(IndexedTokens(prefix))


def corpus(path, n: int) -> str:
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"text": f"document {i} " + "lorem ipsum dolor " * (i % 40)}) + "\n")
    return str(path)


def token_scenario(name, code_a, code_b, code_ref, ref_prefix, prefix, tmp_path, seed):
    log = str(tmp_path / f"{name}.log")
    run_clean(code_a, log)
    before = token_state(prefix)
    work = run_clean(code_ref, log)
    after = token_state(ref_prefix)

    def check():
        if not os.path.exists(prefix + ".idx"):
            return  # no previous output was published under this prefix
        state = token_state(prefix)
        assert state in (before, after)  # killed runs may leave temporary files, never a part
        assert megatron_documents(prefix) in (None, state)  # megatron-core reads the same documents

    kill_repeatedly(name, code_b, work, log, check, seed)
    run_clean(code_b, log)
    # byte-identical documents (megatron-core reads the format: tests/conformance); the killed runs' leftovers gone
    assert token_state(prefix) == after
    assert not glob.glob(prefix + "*.tmp-*")


def test_kill_preprocess(tmp_path):
    src = corpus(tmp_path / "c.jsonl", 20000)
    prefix, ref = str(tmp_path / "out" / "c"), str(tmp_path / "ref" / "c")
    a = PREPROCESS.format(input=src, prefix=prefix, extra=', "--max-documents", "500"')
    b = PREPROCESS.format(input=src, prefix=prefix, extra="")
    r = PREPROCESS.format(input=src, prefix=ref, extra="")
    token_scenario("preprocess", a, b, r, ref + "_text_document", prefix + "_text_document", tmp_path, 3)


def test_kill_merge(tmp_path):
    from energon_arrow.tokens.builder import TokenWriter

    parts = []
    rng = np.random.default_rng(4)
    for i in range(6):
        p = str(tmp_path / f"part{i}")
        lengths = rng.integers(1, 400, size=3000)
        with TokenWriter(p, dtype=np.uint16) as w:
            w.add_documents(rng.integers(0, 60000, size=int(lengths.sum())).astype(np.uint16), lengths)
            w.finalize()
        parts.append(p)
    prefix, ref = str(tmp_path / "merged"), str(tmp_path / "ref")

    def inputs(ps):
        return ", ".join(f'"--input", {p!r}' for p in ps)

    a = MERGE.format(inputs=inputs(parts[:1]), prefix=prefix)
    b = MERGE.format(inputs=inputs(parts), prefix=prefix)
    r = MERGE.format(inputs=inputs(parts), prefix=ref)
    token_scenario("merge", a, b, r, ref, prefix, tmp_path, 4)


# ---- Nanoset index cache ------------------------------------------------------------------------------------
NANOSET = """
from energon_arrow.tokens.nanoset import NanosetBuilder, NanosetConfig
cfg = NanosetConfig([{prefix!r}], 64, seed=3, split="90,10", create_attention_mask=False, cache_dir={cache!r})
READY
NanosetBuilder(cfg).build([{samples}])
"""


def cache_entries(cache: str) -> dict[str, dict[str, bytes]]:
    """Every published entry: name -> array name -> bytes (all must load)."""
    out = {}
    for folder in sorted(glob.glob(os.path.join(cache, "*"))):
        if ".tmp-" in os.path.basename(folder):
            continue
        with open(os.path.join(folder, "description.json")) as f:
            arrays = json.load(f)["arrays"]
        out[os.path.basename(folder)] = {
            a: np.load(os.path.join(folder, f"{a}.npy")).tobytes() for a in arrays
        }
    return out


def test_kill_nanoset_cache_build(tmp_path):
    from energon_arrow.tokens.builder import TokenWriter

    prefix = str(tmp_path / "corpus")
    rng = np.random.default_rng(5)
    lengths = rng.integers(1, 200, size=30_000)
    with TokenWriter(prefix, dtype=np.uint16) as w:
        w.add_documents(rng.integers(0, 60000, size=int(lengths.sum())).astype(np.uint16), lengths)
        w.finalize()
    cache, ref = str(tmp_path / "cache"), str(tmp_path / "ref")
    log = str(tmp_path / "nanoset.log")
    run_clean(NANOSET.format(prefix=prefix, cache=cache, samples=100), log)
    before = cache_entries(cache)
    code = NANOSET.format(prefix=prefix, cache=cache, samples=300_000)
    work = run_clean(NANOSET.format(prefix=prefix, cache=ref, samples=300_000), log)
    expected = cache_entries(ref)

    def check():
        entries = cache_entries(cache)
        assert all(entries[k] == v for k, v in before.items())
        assert all(v == expected[k] for k, v in entries.items() if k not in before)

    kill_repeatedly("nanoset cache", code, work, log, check, seed=5)
    run_clean(code, log)
    entries = cache_entries(cache)
    assert set(entries) == set(before) | set(expected)
    assert all(entries[k] == v for k, v in expected.items())
    # a killed build leaves its staging folder behind; the next build of the same entry removes it
    assert not glob.glob(os.path.join(cache, "*.tmp-*"))
