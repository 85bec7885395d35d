"""Crude JSONL datasets: energon's `.jsonl.idx` index written byte-identically, samples loaded through cookers,
inside metadatasets, with clear errors for bad lines and stale indexes."""

from __future__ import annotations

import collections

import numpy as np
import pytest

import energon_arrow as ea
from energon_arrow.index.jsonl_index import JsonlIndexError, jsonl_offsets, prepare_jsonl
from energon_arrow.loader.errors import LoaderError


def cook(sample):
    return ea.TextSample(
        __key__=sample["__key__"],
        __restore_key__=sample["__restore_key__"],
        __subflavors__=sample["__subflavors__"],
        text=sample["json"]["text"],
    )


class TE(ea.DefaultTaskEncoder):
    cookers = [ea.Cooker(cook)]


def _write(path, n, blank_every=0):
    lines = []
    for i in range(n):
        lines.append(f'{{"text": "t{i}", "i": {i}}}')
        if blank_every and i % blank_every == 0:
            lines.append("   ")
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_index_matches_energons_for_any_chunking(tmp_path):
    from megatron.energon.epathlib import EPath
    from megatron.energon.flavors.jsonl.jsonl_prepare import JsonlPreparator

    path = _write(tmp_path / "d.jsonl", 40, blank_every=7)
    with open(path, "ab") as f:
        f.write(b'\n\n{"text": "last"}')  # blank lines, then a last line without newline
    JsonlPreparator.prepare_dataset(EPath(path))
    ref = (tmp_path / "d.jsonl.idx").read_bytes()
    assert prepare_jsonl(path) == 41
    assert (tmp_path / "d.jsonl.idx").read_bytes() == ref
    data = (tmp_path / "d.jsonl").read_bytes()
    for k in (1, 3, 64):
        chunks = [data[i : i + k] for i in range(0, len(data), k)]
        assert np.array_equal(jsonl_offsets(chunks), np.frombuffer(ref, "<u8"))


def test_bad_lines_name_the_byte(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"a": 1}\n[1, 2]\n')
    with pytest.raises(JsonlIndexError, match=r"bad\.jsonl: byte 9: .*JSON object"):
        prepare_jsonl(str(path))
    (tmp_path / "empty.jsonl").write_text("\n \n")
    with pytest.raises(JsonlIndexError, match="no JSON lines"):
        prepare_jsonl(str(tmp_path / "empty.jsonl"))


def _samples(path, split="train", **kw):
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
    get = ea.get_train_dataset if split == "train" else ea.get_val_dataset
    extra = {"repeat": False} if split == "train" else {}
    ds = get(path, worker_config=wc, batch_size=4, task_encoder=TE(), **extra, **kw)
    return [(k, t) for b in ea.get_loader(ds) for k, t in zip(b.__key__, b.text)]


def test_load_jsonl_directly_and_in_a_metadataset(tmp_path):
    path = _write(tmp_path / "d.jsonl", 30, blank_every=4)
    prepare_jsonl(path)
    val = _samples(path, split="val")
    assert val == [(str(i), f"t{i}") for i in range(30)]
    assert sorted(_samples(path)) == sorted(val)
    mds = tmp_path / "m.yaml"
    mds.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    blend_epochized:\n"
        "      - {path: d.jsonl, repetitions: 2, subset: {range: [0, 10]}}\n"
    )
    counts = collections.Counter(_samples(str(mds)))
    assert counts == {(str(i), f"t{i}"): 2 for i in range(10)}


def test_jsonl_with_aux_folder(tmp_path):
    """energon's documented polylithic JSONL form: a metadataset giving a .jsonl leaf an `aux:` folder."""
    path = _write(tmp_path / "d.jsonl", 4)
    prepare_jsonl(path)
    (tmp_path / "media").mkdir()
    for i in range(4):
        (tmp_path / "media" / f"t{i}.txt").write_text(f"media {i}")

    def cook_aux(sample, media):
        return ea.TextSample(**ea.basic_sample_keys(sample), text=media.get(sample["json"]["text"] + ".txt"))

    class AuxTE(ea.DefaultTaskEncoder):
        cookers = [ea.Cooker(cook_aux)]

    mds = tmp_path / "m.yaml"
    mds.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    path: d.jsonl\n"
        "    aux:\n      media: filesystem://./media\n"
    )
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = ea.get_val_dataset(
        str(mds), worker_config=wc, batch_size=4, task_encoder=AuxTE(), split_part="train"
    )
    assert next(iter(ea.get_loader(ds))).text == [f"media {i}" for i in range(4)]


def test_missing_or_stale_index(tmp_path):
    path = _write(tmp_path / "d.jsonl", 5)
    with pytest.raises(LoaderError, match=r"d\.jsonl\.idx: no index"):
        _samples(path)
    prepare_jsonl(path)
    with open(path, "a") as f:
        f.write('{"text": "new"}\n')
    with pytest.raises(LoaderError, match="run prepare again"):
        _samples(path)


def test_cli_prepare_writes_the_index(tmp_path, capsys):
    from energon_arrow.cli.main import main

    path = _write(tmp_path / "c.jsonl", 3)
    main(["prepare", path])
    assert "3 samples" in capsys.readouterr().out
    ends = np.cumsum([len(line) for line in (tmp_path / "c.jsonl").read_bytes().splitlines(keepends=True)])
    assert (tmp_path / "c.jsonl.idx").read_bytes() == np.r_[0, ends].astype("<u8").tobytes()
    with pytest.raises(SystemExit):
        main(["prepare", path, "--split-ratio", "1,0,0"])


def test_crude_jsonl_factory(tmp_path):
    path = _write(tmp_path / "d.jsonl", 6)
    prepare_jsonl(path)
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
    factory = ea.DefaultCrudeJsonlDatasetFactory(str(path), training=False, worker_config=wc)
    assert isinstance(factory, ea.CrudeJsonlDatasetFactory) and len(factory) == 6
    assert [s["json"]["i"] for s in ea.get_loader(factory.build())] == list(range(6))
    mds = tmp_path / "m.yaml"
    mds.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    path: d.jsonl\n"
    )
    loaded = ea.load_dataset(str(mds)).get_datasets(training=False, split_part="train", worker_config=wc)
    assert type(loaded.datasets[0].dataset) is ea.DefaultCrudeJsonlDatasetFactory


def test_programmatic_prepare_like_energons(tmp_path):
    """energon's `CrudeJsonlDatasetFactory.prepare_dataset(path) -> count`, for a str, a Path and an EPath."""
    from pathlib import Path

    from megatron.energon.epathlib import EPath as EnergonEPath
    from megatron.energon.flavors.jsonl.jsonl_prepare import JsonlPreparator

    from energon_arrow.epathlib import EPath

    path = _write(tmp_path / "d.jsonl", 9, blank_every=4)
    JsonlPreparator.prepare_dataset(EnergonEPath(path))
    ref = (tmp_path / "d.jsonl.idx").read_bytes()
    for given in (path, Path(path), EPath(path), EnergonEPath(path)):
        (tmp_path / "d.jsonl.idx").unlink()
        assert ea.CrudeJsonlDatasetFactory.prepare_dataset(given) == 9
        assert (tmp_path / "d.jsonl.idx").read_bytes() == ref
    assert ea.DefaultCrudeJsonlDatasetFactory.prepare_dataset(path) == 9
    with pytest.raises(JsonlIndexError, match="must end with .jsonl"):
        ea.CrudeJsonlDatasetFactory.prepare_dataset(str(tmp_path / "d.json"))


def test_cli_prepare_prints_energons_lines(tmp_path):
    from click.testing import CliRunner

    from energon_arrow.cli.prepare import command

    path = tmp_path / "p.jsonl"
    path.write_text("".join(f'{{"i": {i}}}\n\n' for i in range(10)))
    result = CliRunner().invoke(command, [str(path)], catch_exceptions=False)
    assert result.exit_code == 0
    assert result.output.splitlines() == ["Preparing jsonl dataset...", "Done. Found 10 samples."]


def _crude(path, **kw):
    """The crude samples (every key) a cooker receives, in val order."""
    seen = []

    def keep(sample):
        seen.append(dict(sample))
        return ea.TextSample(**ea.basic_sample_keys(sample), text="")

    class KeepTE(ea.DefaultTaskEncoder):
        cookers = [ea.Cooker(keep)]

    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = ea.get_val_dataset(path, worker_config=wc, batch_size=2, task_encoder=KeepTE(), **kw)
    list(ea.get_loader(ds))
    return seen


def test_crude_sample_keys_and_subflavors(tmp_path):
    """energon's JSONL samples: __shard__ is the file name, __subflavors__ is None unless a metadataset sets it."""
    path = _write(tmp_path / "d.jsonl", 3)
    ea.CrudeJsonlDatasetFactory.prepare_dataset(path)
    first = _crude(path)[0]
    assert sorted(first) == sorted(
        ["__key__", "__shard__", "__restore_key__", "__sources__", "__subflavors__", "json"]
    )
    assert (first["__key__"], first["__shard__"], first["__subflavors__"]) == ("0", "d.jsonl", None)
    assert first["__sources__"] == (ea.SourceInfo(path, 0, "d.jsonl", ("0.json",)),)
    head = "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n"
    for body, want in (
        ("    path: d.jsonl\n", None),
        ("    path: d.jsonl\n    subflavors: {}\n", {}),
        ("    blend:\n      - {path: d.jsonl, subflavors: {a: 1}}\n", {"a": 1}),
    ):
        (tmp_path / "m.yaml").write_text(head + body)
        got = [s["__subflavors__"] for s in _crude(str(tmp_path / "m.yaml"), split_part="train")]
        assert got == [want] * 3
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
    assert ea.DefaultCrudeJsonlDatasetFactory(path, training=False, worker_config=wc).subflavors is None
    factory = ea.DefaultCrudeJsonlDatasetFactory(path, training=False, worker_config=wc, subflavors={"b": 2})
    assert [s["__subflavors__"] for s in ea.get_loader(factory.build())] == [{"b": 2}] * 3


@pytest.mark.s3
def test_prepare_and_load_over_s3(tmp_path, s3_root):
    """Programmatic prepare of a .jsonl on S3 (an EPath carrying the storage options), then loading it in a
    metadataset blend from S3."""
    from energon_arrow.adapters import open_storage
    from energon_arrow.epathlib import EPath

    url, options = s3_root
    storage = open_storage(url, options)
    storage.write_atomic("d.jsonl", "".join(f'{{"text": "t{i}", "i": {i}}}\n' for i in range(6)).encode())
    assert ea.CrudeJsonlDatasetFactory.prepare_dataset(EPath(f"{url}/d.jsonl", options)) == 6
    local = _write(tmp_path / "d.jsonl", 6)
    prepare_jsonl(local)
    assert storage.read_bytes("d.jsonl.idx") == (tmp_path / "d.jsonl.idx").read_bytes()
    storage.write_atomic(
        "m.yaml",
        b"__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    blend:\n"
        b"      - {path: d.jsonl, subflavors: {s: 3}}\n",
    )
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = ea.get_val_dataset(
        f"{url}/m.yaml", worker_config=wc, batch_size=3, task_encoder=TE(), split_part="train",
        storage_options=options,
    )  # fmt: skip
    batches = list(ea.get_loader(ds))
    assert [t for b in batches for t in b.text] == [f"t{i}" for i in range(6)]
    assert batches[0].__subflavors__ == [{"s": 3}] * 3
