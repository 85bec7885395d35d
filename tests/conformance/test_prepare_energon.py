"""Our prepare vs megatron-energon 7.4.1's `energon prepare` on the same tars, and energon reading our output."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import tarfile
from pathlib import Path

import pytest
import yaml

from energon_arrow.index.prepare import PrepareOptions, prepare_dataset
from energon_arrow.meta import expand_braces, field_map_dataset, parse_split_parts, parse_split_ratio
from energon_arrow.testing.synthetic import write_webdataset
from tests.reference import energon_in_process
from tests.tar.edge_tars import LONG_DIR, edge_tar

pytestmark = pytest.mark.conformance


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("src")
    write_webdataset(str(root), shards=7, samples_per_shard=6, image_bytes=64, subdir="shards")
    os.makedirs(root / "edge.v1")
    (root / "edge.v1" / "pax.tar").write_bytes(edge_tar(tarfile.PAX_FORMAT))
    (root / "edge.v1" / "gnu.tar").write_bytes(edge_tar(tarfile.GNU_FORMAT, prefix="gnu/"))
    return root


def _copy(source, dest):
    shutil.copytree(source, dest)
    return str(dest)


def _rows(root, table):
    with sqlite3.connect(os.path.join(root, ".nv-meta", "index.sqlite")) as db:
        return set(db.execute(f"SELECT * FROM {table}"))


def _splits(root):
    with open(os.path.join(root, ".nv-meta", "split.yaml")) as f:
        raw = yaml.safe_load(f)
    return {k: [s for e in v for s in expand_braces(e)] for k, v in raw["split_parts"].items()}


CASES = {
    "ratio": (["--split-ratio", "6,2,1"], {"split_ratio": parse_split_ratio("6,2,1")}),
    "shuffled": (
        ["--split-ratio", "6,2,1", "--shuffle-tars"],
        {"split_ratio": parse_split_ratio("6,2,1"), "shuffle_tars": True},
    ),
    "parts": (
        [
            "--split-parts",
            "train:shards/.*0[0-4]",
            "--split-parts",
            "val:shards/shard-00000[56]",
            "--split-parts",
            "test:edge",
        ],
        {
            "split_parts": parse_split_parts(
                ["train:shards/.*0[0-4]", "val:shards/shard-00000[56]", "test:edge"]
            )
        },
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_same_index_as_energon(source, tmp_path, case):
    cli_args, opts = CASES[case]
    ref = _copy(source, tmp_path / "energon")
    ours = _copy(source, tmp_path / "ours")
    energon_in_process("prepare", ref, "--non-interactive", "--num-workers", "1", "--no-progress", *cli_args)
    prepare_dataset(ours, PrepareOptions(num_workers=2, **opts))
    for table in ("samples", "sample_parts"):
        assert _rows(ours, table) == _rows(ref, table)
    info = Path(ours, ".nv-meta", ".info.json").read_bytes()
    assert info == Path(ref, ".nv-meta", ".info.json").read_bytes()
    for shard in json.loads(info)["shard_counts"]:
        assert Path(ours, shard + ".idx").read_bytes() == Path(ref, shard + ".idx").read_bytes(), shard
    assert _splits(ours) == _splits(ref)
    with (
        sqlite3.connect(os.path.join(ours, ".nv-meta", "index.sqlite")) as a,
        sqlite3.connect(os.path.join(ref, ".nv-meta", "index.sqlite")) as b,
    ):
        schema = "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name"
        assert a.execute(schema).fetchall() == b.execute(schema).fetchall()


def test_shards_under_a_linked_folder_are_indexed_as_energon_does(source, tmp_path):
    """A folder of shards symlinked into the dataset: energon's prepare lists its shards (its EPath.glob follows
    the link), so ours must too, under the link's name (a silent difference would train on a part of the data)."""
    from energon_arrow.testing.synthetic import shard_bytes, write_shards

    elsewhere = tmp_path / "elsewhere"
    write_shards(str(elsewhere), 2, lambda s: shard_bytes(s + 10, 5, 64, 0), None, "more")
    ref = _copy(source, tmp_path / "energon")
    ours = _copy(source, tmp_path / "ours")
    for root in (ref, ours):
        os.symlink(elsewhere, os.path.join(root, "linked"), target_is_directory=True)
    energon_in_process(
        "prepare", ref, "--non-interactive", "--num-workers", "1", "--no-progress", "--split-ratio", "1,0,0"
    )
    prepare_dataset(ours, PrepareOptions(num_workers=2, split_ratio=parse_split_ratio("1,0,0")))
    info = json.loads(Path(ours, ".nv-meta", ".info.json").read_bytes())
    assert {"linked/more/shard-000000.tar", "linked/more/shard-000001.tar"} <= set(info["shard_counts"])
    assert (
        Path(ours, ".nv-meta", ".info.json").read_bytes() == Path(ref, ".nv-meta", ".info.json").read_bytes()
    )
    for table in ("samples", "sample_parts"):
        assert _rows(ours, table) == _rows(ref, table)
    assert _splits(ours) == _splits(ref)


def test_hidden_shards_are_left_out_as_energon_leaves_them(source, tmp_path):
    """energon's prepare globs `**/*.tar`, which skips hidden files and hidden folders (a `.cache/` or
    `.ipynb_checkpoints/` copy of a shard): ours must leave them out too."""
    from energon_arrow.testing.synthetic import shard_bytes, write_shards

    ref = _copy(source, tmp_path / "energon")
    ours = _copy(source, tmp_path / "ours")
    for root in (ref, ours):
        write_shards(root, 1, lambda s: shard_bytes(s + 10, 5, 64, 0), None, ".cache")
        write_shards(root, 1, lambda s: shard_bytes(s + 20, 5, 64, 0), None, "shards/.old")
        Path(root, "shards", ".copy.tar").write_bytes(Path(root, "shards", "shard-000000.tar").read_bytes())
    energon_in_process(
        "prepare", ref, "--non-interactive", "--num-workers", "1", "--no-progress", "--split-ratio", "1,0,0"
    )
    prepare_dataset(ours, PrepareOptions(num_workers=2, split_ratio=parse_split_ratio("1,0,0")))
    info = Path(ours, ".nv-meta", ".info.json").read_bytes()
    assert not [s for s in json.loads(info)["shard_counts"] if "/." in "/" + s]
    assert info == Path(ref, ".nv-meta", ".info.json").read_bytes()
    assert _rows(ours, "samples") == _rows(ref, "samples")


def test_energon_loads_our_dataset(source, tmp_path):
    from megatron.energon import WorkerConfig, get_loader, get_train_dataset, get_val_dataset
    from megatron.energon.cache.file_store import WebdatasetFileStore
    from megatron.energon.epathlib import EPath

    root = _copy(source, tmp_path / "ours")
    prepare_dataset(
        root,
        PrepareOptions(
            split_ratio=parse_split_ratio("6,2,1"),
            exclude="edge",  # the edge shards hold undecodable "images"; WebdatasetFileStore reads them below
            dataset_yaml=field_map_dataset("TextSample", {"text": "txt"}),
        ),
    )
    with sqlite3.connect(os.path.join(root, ".nv-meta", "index.sqlite")) as db:
        keys_by_shard = {}
        names = list(json.loads(Path(root, ".nv-meta", ".info.json").read_bytes())["shard_counts"])
        for tar_id, key in db.execute("SELECT tar_file_id, sample_key FROM samples"):
            keys_by_shard.setdefault(names[tar_id], []).append(key)
    splits = _splits(root)
    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    for split, loader in (("train", get_train_dataset), ("val", get_val_dataset)):
        kwargs = dict(worker_config=wc, batch_size=None)
        if split == "train":
            kwargs.update(shuffle_buffer_size=None, max_samples_per_sequence=None, repeat=False)
        ds = loader(root, **kwargs)
        seen = [sample.__key__ for sample in get_loader(ds)]
        expected = [k for shard in splits[split] for k in keys_by_shard.get(shard, [])]
        assert sorted(seen) == sorted(expected) and len(seen) == len(set(seen))
    key = keys_by_shard["shards/shard-000002.tar"][3]
    prepare_dataset(root, PrepareOptions(split_ratio=parse_split_ratio("1,0,0")))
    store = WebdatasetFileStore(EPath(root))
    assert store["dir.v1/sub/k1.seg.txt"][0] == b"key dirs with dots"
    assert store["gnu/dir.v1/sub/k2.empty"][0] == b""
    assert store[f"gnu/{LONG_DIR}/{'k' * 120}.txt"][0] == "é ü".encode()
    data, _ = store[f"{key}.txt"]
    assert isinstance(data, bytes) and data


def test_programmatic_prepare_dataset_like_energons(source, tmp_path):
    """energon's documented programmatic prepare (`BaseWebdatasetFactory.prepare_dataset(path, tars, ...)`) with
    the same call: the same files, split and returned part types; only the listed shards, in the given order."""
    from megatron.energon.flavors import BaseWebdatasetFactory as EnergonFactory

    import energon_arrow as ea

    ref, ours = _copy(source, tmp_path / "energon"), _copy(source, tmp_path / "ours")
    tars = [f"shards/shard-00000{i}.tar" for i in (3, 0, 1, 2)]
    ticks = []

    def progress_fn(els, length=None):
        ticks.append(length)
        for el in els:
            ticks.append(el)
            yield el

    kw = dict(split_parts_ratio=[("train", 1), ("val", 1), ("test", 0)], split_parts_patterns=None,
              tar_index_only=False, shuffle_seed=None, workers=2)  # fmt: skip
    found = ea.BaseWebdatasetFactory.prepare_dataset(Path(ours), tars, progress_fn=progress_fn, **kw)
    assert found == EnergonFactory.prepare_dataset(Path(ref), tars, **kw) == {"jpg", "txt", "json"}
    assert ticks[0] == 4 and sorted(ticks[1:]) == sorted(tars)
    info = Path(ours, ".nv-meta", ".info.json").read_bytes()
    assert info == Path(ref, ".nv-meta", ".info.json").read_bytes()
    assert _splits(ours) == _splits(ref)
    for table in ("samples", "sample_parts"):
        assert _rows(ours, table) == _rows(ref, table)
    from energon_arrow.meta.errors import MetaError

    with pytest.raises(MetaError, match="fix_duplicates"):
        ea.BaseWebdatasetFactory.prepare_dataset(ours, tars, fix_duplicates=True)
