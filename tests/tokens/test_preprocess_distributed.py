"""`energon-arrow preprocess` under torch.distributed: 2-3 local ranks (gloo on loopback) tokenize their slices of
the inputs, rank 0 merges one output, byte-identical to a single-process run."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.distributed


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _corpus(folder: Path, files: int = 5, docs: int = 40) -> str:
    folder.mkdir()
    for i in range(files):
        with open(folder / f"part-{i}.jsonl", "w") as f:
            for j in range(docs):
                f.write(json.dumps({"text": f"document {i}-{j} " + "word " * ((i * 7 + j) % 13)}) + "\n")
    return str(folder / "*.jsonl")


def _preprocess(prefix: str, inputs: str, *extra: str, world: int = 1) -> list[tuple[int, str, str]]:
    args = [
        "--input",
        inputs,
        "--output-prefix",
        prefix,
        "--tokenizer",
        "byte",
        "--append-eod",
        "--quiet",
        *extra,
    ]
    cmd = [sys.executable, "-m", "energon_arrow", "preprocess", *args]
    if world == 1:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
        return [(p.returncode, p.stdout, p.stderr)]
    port, procs = _free_port(), []
    for rank in range(world):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(world))
        env.update(RANK=str(rank), LOCAL_RANK=str(rank), GLOO_SOCKET_IFNAME="lo")
        procs.append(
            subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
    outs = [p.communicate(timeout=240) for p in procs]
    return [(p.returncode, out, err) for p, (out, err) in zip(procs, outs)]


def _outputs(prefix: str) -> dict[str, bytes]:
    return {ext: Path(f"{prefix}_text_document.{ext}").read_bytes() for ext in ("bin", "idx")}


@pytest.fixture(scope="module")
def single_run(tmp_path_factory) -> tuple[str, dict[str, bytes]]:
    """The corpus and its single-process output, made once for the world sizes compared with it."""
    base = tmp_path_factory.mktemp("single")
    inputs = _corpus(base / "in")
    [(rc, _, err)] = _preprocess(str(base / "single"), inputs)
    assert rc == 0, err
    return inputs, _outputs(str(base / "single"))


@pytest.mark.parametrize("world", [2, 3])
def test_ranks_give_the_single_process_output(tmp_path, world, single_run):
    inputs, single = single_run
    (tmp_path / "out").mkdir()
    dist_prefix = str(tmp_path / "out" / "dist")
    ranks = _preprocess(dist_prefix, inputs, world=world)
    for rc, _, err in ranks:
        assert rc == 0, err
    assert "documents" in ranks[0][1] and all(out == "" for _, out, _ in ranks[1:])  # only rank 0 reports
    assert _outputs(dist_prefix) == single
    assert sorted(os.listdir(tmp_path / "out")) == [
        f"dist_text_document.{e}" for e in ("bin", "crc", "idx")
    ]  # the ranks' parts are gone


def test_max_documents_across_ranks(tmp_path):
    inputs = _corpus(tmp_path / "in")
    (tmp_path / "out").mkdir()
    single, dist_prefix = str(tmp_path / "out" / "single"), str(tmp_path / "out" / "dist")
    assert _preprocess(single, inputs, "--max-documents", "95")[0][0] == 0
    for rc, _, err in _preprocess(dist_prefix, inputs, "--max-documents", "95", world=2):
        assert rc == 0, err
    assert _outputs(dist_prefix) == _outputs(single)


def test_a_failing_rank_fails_every_rank(tmp_path):
    inputs = _corpus(tmp_path / "in", files=2)
    with open(tmp_path / "in" / "part-1.jsonl", "a") as f:  # unit 1: rank 1's
        f.write("{not json\n")
    (tmp_path / "out").mkdir()
    ranks = _preprocess(str(tmp_path / "out" / "dist"), inputs, world=2)
    assert all(rc != 0 for rc, _, _ in ranks), ranks
    assert "rank 1: BadLineError" in ranks[0][2] and "part-1.jsonl:41: invalid JSON" in ranks[0][2]
    assert os.listdir(tmp_path / "out") == []  # no output, no parts left
