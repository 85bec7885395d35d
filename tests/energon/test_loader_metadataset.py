"""MetadatasetV2: blend weights, blend_epochized repetitions, subflavors, subset ranges, split_part."""

from __future__ import annotations

import collections

import pytest

import energon_arrow as ea
from energon_arrow.loader.errors import LoaderError
from tests.energon_order import global_order_train_dataset


class RawTE(ea.DefaultTaskEncoder):
    decoder = None


def _mds(tmp_path, body: str) -> str:
    path = tmp_path / "mds.yaml"
    path.write_text("__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n" + body)
    return str(path)


def _keys(path, n_batches, batch=8, split="train", **kw):
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
    get = global_order_train_dataset if split == "train" else ea.get_val_dataset
    ds = get(path, worker_config=wc, batch_size=batch, task_encoder=RawTE(), split_part=split, **kw)
    it = iter(ea.get_loader(ds))
    out = [next(it) for _ in range(n_batches)] if n_batches else list(it)
    it.close()
    return out


def test_blend_weights_subsets_and_subflavors(tmp_path, prepared_root):
    path = _mds(
        tmp_path,
        f"""  train:
    blend:
      - weight: 3
        path: {prepared_root}
        subset: {{range: [0, 40]}}
        subflavors: {{src: a}}
      - weight: 1
        path: {prepared_root}
        subset: {{range: ["50%", end]}}
        subflavors: {{src: b}}
""",
    )
    batches = _keys(path, 20)
    flavors = collections.Counter(f["src"] for b in batches for f in b.__subflavors__)
    assert flavors == {"a": 120, "b": 40}
    keys_a = {k for b in batches for k, f in zip(b.__key__, b.__subflavors__) if f["src"] == "a"}
    keys_b = {k for b in batches for k, f in zip(b.__key__, b.__subflavors__) if f["src"] == "b"}
    assert all(k.startswith("000000_") for k in keys_a)  # rows 0..39 = the first train shard
    assert all(k.startswith("000002_") or k.startswith("000001_0000") for k in keys_b)  # rows 60..119


def test_blend_epochized_repetitions(tmp_path, prepared_root):
    path = _mds(
        tmp_path,
        f"""  train:
    blend_epochized:
      - repetitions: 2
        path: {prepared_root}
        subset: {{range: [0, 20]}}
        subflavors: {{src: a}}
      - repetitions: 1
        path: {prepared_root}
        subset: {{range: [20, 60]}}
        subflavors: {{src: b}}
""",
    )
    batches = _keys(path, 10)  # 80 samples = one epoch of 2 x 20 + 1 x 40
    seen = collections.Counter((f["src"], k) for b in batches for k, f in zip(b.__key__, b.__subflavors__))
    assert sum(v for (s, _), v in seen.items() if s == "a") == 40
    assert set(seen.values()) == {1, 2}
    assert all(v == 2 for (s, _), v in seen.items() if s == "a")


def test_val_split_part_and_single_dataset(tmp_path, prepared_root):
    path = _mds(
        tmp_path,
        f"""  val:
    path: {prepared_root}
    split_part: train
    subset: {{range: [5, 12]}}
""",
    )
    keys = [k for b in _keys(path, 0, batch=3, split="val") for k in b.__key__]
    assert keys == [f"000000_{i:06d}" for i in range(5, 12)]


def test_metadataset_errors(tmp_path, prepared_root):
    with pytest.raises(LoaderError, match="no split 'train'"):
        _keys(_mds(tmp_path, f"  val:\n    path: {prepared_root}\n"), 1)
    with pytest.raises(LoaderError, match="line 6: join must be a non-empty list"):
        _keys(_mds(tmp_path, "  train:\n    joiner: {__class__: TextSample}\n    join: []\n"), 1)
    with pytest.raises(LoaderError, match=r"subset range \[0, 1000\] is outside the split's 120 samples"):
        _keys(_mds(tmp_path, f"  train:\n    path: {prepared_root}\n    subset: {{range: [0, 1000]}}\n"), 1)
    with pytest.raises(LoaderError, match=r"mds.yaml: line 6: unknown key 'colour' in split 'train'"):
        _keys(_mds(tmp_path, f"  train:\n    path: {prepared_root}\n    colour: red\n"), 1)


def test_subset_keeps_everything_but_the_rows():
    import numpy as np
    import pyarrow as pa

    from energon_arrow.adapters import open_storage
    from energon_arrow.loader.source import SplitSource

    rows = np.arange(5, dtype=np.int64)
    src = SplitSource(
        open_storage("memory://ea-subset"),
        ["a.tar"],
        rows.astype(np.int32),
        rows,
        rows * 10,
        rows + 1,
        keys=pa.array(list("abcde")),
        name="ds",
        aux={"x": 1},
        _key_maps=["map"],
    )
    sub = src.subset(1, 3)
    assert (
        sub.byte_offset.tolist() == [10, 20] and sub.keys.to_pylist() == ["b", "c"] and sub.name == "ds[1:3]"
    )
    assert (sub.aux, sub._key_maps, sub.shard_paths) == ({"x": 1}, ["map"], ["a.tar"])


def test_relative_paths_are_normalised_under_urls_too():
    from energon_arrow.metadataset.tree import join_path as _join

    assert _join("s3://b/meta", "../data/ds") == "s3://b/data/ds"
    assert _join("/x/meta", "../data/ds") == "/x/data/ds"
    assert _join("s3://b/meta", "s3://c/ds") == "s3://c/ds"


def test_invalid_metadataset_yaml_names_the_line(tmp_path):
    from energon_arrow.loader.errors import LoaderError
    from energon_arrow.metadataset.tree import resolve_split

    path = tmp_path / "m.yaml"
    path.write_text("__class__: MetadatasetV2\nsplits:\n  train: [\n")
    with pytest.raises(LoaderError, match=r"m\.yaml: line \d+, column \d+: invalid YAML"):
        resolve_split(str(path), "train")


@pytest.mark.parametrize(
    "body, message",
    [
        (
            "splits:\n  train:\n    blend_epochized:\n      - path: ds\n        repetitions: null\n",
            r"repetitions must be a number >= 0, got None",
        ),
        (
            "splits:\n  train:\n    blend:\n      - path: ds\n        weight: heavy\n",
            r"weight must be a number >= 0, got 'heavy'",
        ),
        ("splits:\n  train:\n    path: ds\n    aux: [a, b]\n", r"'aux' must be a mapping"),
        ("splits:\n  train:\n    path: ds\n    subflavors: 3\n", r"'subflavors' must be a mapping"),
        (
            "splits:\n  train:\n    path: ds\n    split_part: [1]\n",
            r"'split_part' must be a non-empty string",
        ),
        ("splits:\n  train:\n    path: {a: 1}\n", r"'path' must be a non-empty string"),
        ("splits: [train, 1]\n", r"'splits' must be a mapping"),
        ("splits:\n  1: {path: ds}\n  a: {path: ds}\n", r"no split 'train' \(splits: \['1', 'a'\]\)"),
        ("splits:\n  train:\n    path: ds\n    1: x\n    b: y\n", r"line 5: unknown key 1 in split 'train'"),
    ],
)
def test_wrongly_typed_metadataset_values_are_loader_errors(tmp_path, body, message):
    """Found by the fuzz suite (tests/reliability): these raised TypeError/AttributeError before."""
    from energon_arrow.metadataset.tree import resolve_split

    path = tmp_path / "m.yaml"
    path.write_text("__class__: MetadatasetV2\n" + body)
    with pytest.raises(LoaderError, match=message):
        resolve_split(str(path), "train")


@pytest.mark.parametrize("bound", ["abc%", "nan%", "inf%", float("inf"), [1]])
def test_bad_subset_bounds_are_loader_errors(bound):
    from energon_arrow.metadataset.subset import parse_subset

    with pytest.raises(LoaderError, match="subset bound"):
        parse_subset({"range": [bound, "end"]}, "m.yaml")
