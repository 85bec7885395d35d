"""The README's main job, `energon-arrow demo`, runs end to end on small generated data."""

from __future__ import annotations

import json
import os

from energon_arrow.cli.main import main


def test_demo_end_to_end(tmp_path, capsys):
    workdir = str(tmp_path / "demo")
    main(
        [
            "demo",
            "--workdir",
            workdir,
            "--shards",
            "4",
            "--samples-per-shard",
            "40",
            "--documents",
            "300",
            "--workers",
            "1",
        ]
    )
    out = capsys.readouterr().out
    assert "demo finished" in out
    assert "one epoch of the train split" in out
    assert "the restored loader continues with the same" in out
    assert "GPT indices (Megatron GPTDataset order) built" in out
    meta = os.path.join(workdir, "webdataset", ".nv-meta")
    for name in (".info.json", "split.yaml", "dataset.yaml", "index.sqlite", "index.uuid"):
        assert os.path.exists(os.path.join(meta, name)), name
    with open(os.path.join(meta, ".info.json")) as f:
        info = json.load(f)
    assert sum(info["shard_counts"].values()) == 160
    assert os.path.exists(os.path.join(workdir, "tokens", "corpus_text_document.idx"))


def test_demo_removes_only_its_own_earlier_outputs(tmp_path):
    from energon_arrow.cli.demo import DEMO_OUTPUTS, _remove_previous_run

    for name in DEMO_OUTPUTS:
        if name.endswith(".jsonl"):
            (tmp_path / name).write_text("{}\n")
        else:
            (tmp_path / name / "sub").mkdir(parents=True)
    (tmp_path / "notes.txt").write_text("mine")
    _remove_previous_run(str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["notes.txt"]
