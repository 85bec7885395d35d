import json
import os
import random

import pytest
import yaml

from energon_arrow.adapters import open_storage
from energon_arrow.meta import (
    DatasetInfo,
    MetaError,
    SplitConfig,
    check_field_map,
    collapse_names,
    crude_dataset,
    dataset_yaml_bytes,
    expand_braces,
    field_map_dataset,
    field_map_parts,
    info_json_bytes,
    parse_dataset_yaml,
    parse_field_map,
    parse_info,
    parse_split,
    parse_split_parts,
    parse_split_ratio,
    pattern_split,
    ratio_split,
    read_info,
    read_split,
    read_tar_index,
    sample_loader_dataset,
    sample_loader_py,
    split_yaml_bytes,
    tar_index_bytes,
    tar_index_name,
    unmatched_parts,
)


@pytest.mark.parametrize(
    "pattern, expected",
    [
        ("a{000..003}.tar", ["a000.tar", "a001.tar", "a002.tar", "a003.tar"]),
        ("x{1..2}{a,b}", ["x1a", "x1b", "x2a", "x2b"]),
        ("{a,b{c,d}}e", ["ae", "bce", "bde"]),
        ("s{9..11}", ["s9", "s10", "s11"]),
        ("{1..09}", ["01", "02", "03", "04", "05", "06", "07", "08", "09"]),
        ("{10..1..3}", ["10", "7", "4", "1"]),
        ("{a..e..2}", ["a", "c", "e"]),
        ("no{brace}", ["no{brace}"]),
        ("plain.tar", ["plain.tar"]),
    ],
)
def test_expand_braces(pattern, expected):
    assert expand_braces(pattern) == expected


def test_collapse_round_trips():
    names = [f"s/shard-{i:06d}.tar" for i in (0, 1, 2, 3, 5, 6, 9)] + [
        "x.tar",
        "a9.tar",
        "a10.tar",
        "a11.tar",
    ]
    collapsed = collapse_names(names)
    assert collapsed[:3] == [
        "s/shard-{000000..000003}.tar",
        "s/shard-{000005..000006}.tar",
        "s/shard-000009.tar",
    ]
    assert [n for c in collapsed for n in expand_braces(c)] == names
    odd = ["a{b}.tar", "a,1.tar"]
    assert collapse_names(odd) == odd


def test_info_round_trip(local_root):
    store = open_storage(local_root[0])
    info = DatasetInfo({"b/s0.tar": 3, "a/s1.tar": 2})
    data = info_json_bytes(info)
    assert data.decode() == json.dumps(
        {"energon_version": "7.4.1", "shard_counts": info.shard_counts}, indent=2
    )
    store.write_atomic(".nv-meta/.info.json", data)
    back = read_info(store)
    assert back == info and back.shards == ["b/s0.tar", "a/s1.tar"] and back.total_samples == 5
    assert back.shard_ids() == {"b/s0.tar": 0, "a/s1.tar": 1}


def test_info_legacy_yaml_and_errors(local_root):
    store = open_storage(local_root[0])
    with pytest.raises(MetaError, match="no such folder"):  # the root itself is missing (issue 27)
        read_info(store)
    os.makedirs(local_root[0])
    with pytest.raises(MetaError, match="not prepared"):
        read_info(store)
    store.write_atomic(".nv-meta/.info.yaml", "energon_version: 2.0\nshard_counts:\n  s.tar: 4\n")
    assert read_info(store).shard_counts == {"s.tar": 4}
    with pytest.raises(MetaError, match="line 1"):
        parse_info("{bad", "x/.info.json")
    with pytest.raises(MetaError, match="not a non-negative integer"):
        parse_info('{"shard_counts": {"s.tar": -1}}')


def test_split_yaml_expansion_and_excludes(local_root):
    store = open_storage(local_root[0])
    text = (
        "split_parts:\n  train:\n  - s/shard-{000..003}.tar\n  val:\n  - s/shard-004.tar\n  test: []\n"
        "exclude:\n- s/shard-001.tar\n- s/shard-{002..003}.tar/key7\n"
    )
    store.write_atomic(".nv-meta/split.yaml", text)
    cfg = read_split(store)
    assert cfg.shards("train") == ["s/shard-000.tar", "s/shard-002.tar", "s/shard-003.tar"]
    assert cfg.excluded_shards() == {"s/shard-001.tar"}
    assert cfg.excluded_samples() == {"s/shard-002.tar": {"key7"}, "s/shard-003.tar": {"key7"}}
    known = [f"s/shard-{i:03d}.tar" for i in range(5)]
    assert cfg.excluded_shards(known) == {"s/shard-001.tar"}
    assert cfg.excluded_samples(known)["s/shard-003.tar"] == {"key7"}
    assert cfg.shards("test") == []
    with pytest.raises(MetaError, match="not in split config"):
        cfg.shards("nope")
    with pytest.raises(MetaError, match=r"split\.yaml:2: unknown key 'excludes' \(a split config takes"):
        parse_split("split_parts: {}\nexcludes: [a.tar]\n", "split.yaml")


def test_split_yaml_bytes_layout():
    cfg = SplitConfig({"train": [f"s-{i:03d}.tar" for i in range(3)], "val": [], "test": ["t.tar"]})
    out = split_yaml_bytes(cfg).decode()
    assert out == "split_parts:\n  train:\n  - s-{000..002}.tar\n  val: []\n  test:\n  - t.tar\nexclude: []\n"
    assert parse_split(out).expanded().split_parts == cfg.split_parts
    assert yaml.safe_load(split_yaml_bytes(cfg, collapse=False))["split_parts"]["train"][2] == "s-002.tar"


def test_ratio_split_arithmetic():
    shards = [f"s{i:03d}.tar" for i in range(64)]
    out = ratio_split(shards, parse_split_ratio("8,1,1"))
    assert [len(v) for v in out.values()] == [51, 6, 7]
    assert sum(out.values(), []) == shards
    shuffled = ratio_split(shards, parse_split_ratio("0.8, 0.1, 0.1"), shuffle_seed=42)
    order = list(shards)
    random.Random(42).shuffle(order)
    assert sum(shuffled.values(), []) == order
    assert [len(v) for v in ratio_split(shards[:3], parse_split_ratio("1,0,0")).values()] == [3, 0, 0]
    for bad in ("8,1", "a,b,c", "0,0,0", "-1,1,1"):
        with pytest.raises(MetaError, match="--split-ratio"):
            parse_split_ratio(bad)


def test_pattern_split_anchored_match():
    shards = ["train/a.tar", "train/b.tar", "val/a.tar", "x/train/c.tar"]
    parts = parse_split_parts(["train:train/.*", "val:{val,x}/", "test:nothing"])
    out = pattern_split(shards, parts)
    assert out == {"train": ["train/a.tar", "train/b.tar"], "val": ["val/a.tar", "x/train/c.tar"], "test": []}
    assert unmatched_parts(out) == ["test"]
    with pytest.raises(MetaError, match="invalid regex"):
        parse_split_parts(["train:("])
    with pytest.raises(MetaError, match="NAME:REGEX"):
        parse_split_parts(["noseparator"])


def test_dataset_yaml_shapes():
    fm = field_map_dataset("CaptioningSample", {"image": "jpg", "caption": "txt"})
    text = dataset_yaml_bytes(fm).decode()
    assert yaml.safe_load(text) == {
        "sample_type": {"__module__": "megatron.energon", "__class__": "CaptioningSample"},
        "field_map": {"image": "jpg", "caption": "txt"},
    }
    assert parse_dataset_yaml(text).field_map == {"image": "jpg", "caption": "txt"}
    crude = yaml.safe_load(dataset_yaml_bytes(crude_dataset()))
    assert crude == {"__module__": "megatron.energon", "__class__": "CrudeWebdataset"}
    assert parse_dataset_yaml(dataset_yaml_bytes(crude_dataset()).decode()).crude
    loader = yaml.safe_load(dataset_yaml_bytes(sample_loader_dataset("TextSample")))
    assert loader["sample_loader"] == "sample_loader.py:sample_loader"
    assert loader["part_filter"] == "sample_loader.py:part_filter"
    code = sample_loader_py("CaptioningSample", ["txt", "jpg"]).decode()
    ns: dict = {}
    exec(compile(code, "sample_loader.py", "exec"), ns)
    assert ns["part_filter"]("jpg") and not ns["part_filter"]("json")


def test_field_map_checks():
    assert field_map_parts("json[a][0],txt") == ["json", "txt"]
    check_field_map("CaptioningSample", {"image": "jpg,png", "caption": "json[c]"}, {"jpg", "json"})
    with pytest.raises(MetaError, match="'caption' maps to part 'txt'"):
        check_field_map("CaptioningSample", {"image": "jpg", "caption": "txt"}, {"jpg"})
    with pytest.raises(MetaError, match="required field"):
        check_field_map("CaptioningSample", {"image": "jpg"})
    with pytest.raises(MetaError, match="has no field"):
        check_field_map("TextSample", {"text": "txt", "bogus": "x"})
    with pytest.raises(MetaError, match="unknown sample type"):
        field_map_dataset("NoSuchSample", {})
    with pytest.raises(MetaError, match="invalid JSON"):
        parse_field_map("{")


def test_tar_index_file(local_root):
    store = open_storage(local_root[0])
    assert tar_index_name("a.b/s.tar") == "a.b/s.tar.idx"
    store.write_atomic(tar_index_name("a.b/s.tar"), tar_index_bytes([0, 1536, 3072]))
    assert read_tar_index(store, "a.b/s.tar").tolist() == [0, 1536, 3072]


def test_class_style_dataset_yaml_parses_and_round_trips():
    from energon_arrow.meta import MetaError, dataset_yaml_bytes, parse_dataset_yaml

    text = (
        "__module__: megatron.energon\n__class__: VQAOCRWebdataset\nfield_map: {image: jpg, context: txt}\n"
    )
    d = parse_dataset_yaml(text, "ds.yaml")
    assert (d.sample_type, d.dataset_class, d.field_map) == (
        "VQAOCRSample",
        "VQAOCRWebdataset",
        {"image": "jpg", "context": "txt"},
    )
    assert parse_dataset_yaml(dataset_yaml_bytes(d).decode(), "again") == d
    std = "__class__: StandardWebdatasetFactory\nsample_type: {__module__: megatron.energon, __class__: TextSample}\nfield_map: {text: txt}\n"
    assert parse_dataset_yaml(std, "std.yaml").sample_type == "TextSample"
    with pytest.raises(MetaError, match=r"ds\.yaml: unknown dataset __class__ 'FooWebdataset'"):
        parse_dataset_yaml(
            "__module__: megatron.energon\n__class__: FooWebdataset\nfield_map: {}\n", "ds.yaml"
        )
    with pytest.raises(MetaError, match="fixes the sample type"):
        parse_dataset_yaml(text + "sample_type: {__class__: TextSample}\n", "ds.yaml")
