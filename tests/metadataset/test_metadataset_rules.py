"""Metadataset rules with energon 7.4's semantics: blend_epochized epochs, subset composition, nesting, v1,
subflavor merging, unknown keys and cycles."""

from __future__ import annotations

import collections

import pytest

import energon_arrow as ea
from energon_arrow.loader.errors import LoaderError
from energon_arrow.metadataset.subset import Subset, merge_subset, parse_subset
from energon_arrow.metadataset.tree import resolve_split

HEAD = "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n"


class RawTE(ea.DefaultTaskEncoder):
    decoder = None


def _write(tmp_path, name, body, head=HEAD) -> str:
    path = tmp_path / name
    path.write_text(head + body)
    return str(path)


def _epoch(path, batch=10, split="train", **kw):
    """Every sample of one training epoch (repeat=False) or of the validation split."""
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
    if split == "train":
        ds = ea.get_train_dataset(
            path, worker_config=wc, batch_size=batch, task_encoder=RawTE(), repeat=False, **kw
        )
    else:
        ds = ea.get_val_dataset(path, worker_config=wc, batch_size=batch, task_encoder=RawTE(), **kw)
    return [
        (k, tuple(sorted(f.items())) if f else ())
        for b in ea.get_loader(ds)
        for k, f in zip(b.__key__, b.__subflavors__)
    ]


def test_blend_epochized_yields_every_sample_of_each_repetition(tmp_path, prepared_root):
    path = _write(
        tmp_path,
        "m.yaml",
        f"""  train:
    blend_epochized:
      - repetitions: 1
        path: {prepared_root}
        subset: {{range: [0, 50]}}
      - repetitions: 2
        path: {prepared_root}
        subset: {{range: [0, 50]}}
""",
    )
    keys = [k for k, _ in _epoch(path, batch=7)]
    assert len(keys) == 150
    assert set(collections.Counter(keys).values()) == {3}


def test_fractional_repetitions_take_that_fraction_of_a_pass(tmp_path, prepared_root):
    path = _write(
        tmp_path,
        "m.yaml",
        f"""  train:
    blend_epochized:
      - repetitions: 1.5
        path: {prepared_root}
        subset: {{range: [0, 25]}}
        subflavors: {{src: a}}
      - repetitions: 0.3
        path: {prepared_root}
        subset: {{range: [40, 80]}}
        subflavors: {{src: b}}
""",
    )
    seen = collections.Counter(_epoch(path, batch=4))
    a = {k: v for (k, f), v in seen.items() if f == (("src", "a"),)}
    b = {k: v for (k, f), v in seen.items() if f == (("src", "b"),)}
    assert sum(a.values()) == 25 + 12 and len(a) == 25 and sorted(a.values()).count(2) == 12
    assert sum(b.values()) == 12 and set(b.values()) == {1}  # floor(0.3 * 40) distinct samples


def test_epochs_repeat_with_the_same_counts(tmp_path, prepared_root):
    path = _write(
        tmp_path,
        "m.yaml",
        f"""  train:
    blend_epochized:
      - {{repetitions: 2, path: {prepared_root}, subset: {{range: [0, 10]}}}}
      - {{repetitions: 1, path: {prepared_root}, subset: {{range: [10, 25]}}}}
""",
    )
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = ea.get_train_dataset(path, worker_config=wc, batch_size=5, task_encoder=RawTE())
    it = iter(ea.get_loader(ds))
    keys = [k for _ in range(21) for k in next(it).__key__]  # 3 epochs of 35
    for e in range(3):
        c = collections.Counter(keys[35 * e : 35 * (e + 1)])
        assert sum(c[f"000000_{i:06d}"] for i in range(10)) == 20
        assert all(c[f"000000_{i:06d}"] == 1 for i in range(10, 25))


def test_subset_next_to_a_blend_applies_to_every_entry(tmp_path, prepared_root):
    path = _write(
        tmp_path,
        "m.yaml",
        f"""  train:
    subset: {{range: ["0%", "50%"]}}
    blend_epochized:
      - path: {prepared_root}
        subset: {{range: [0, 100]}}
      - path: {prepared_root}
        subset: {{range: ["50%", "100%"]}}
""",
    )
    keys = collections.Counter(k for k, _ in _epoch(path))
    assert sum(keys.values()) == 50 + 30  # [0, 50) of [0, 100); then 50%..75% of 120 = rows 60..89
    rows = sorted(int(k[:6]) * 40 + int(k[7:]) for k in keys)
    assert rows == sorted([*range(50), *range(60, 90)])


def test_subset_composition_is_energons():
    half = parse_subset({"range": ["0%", "50%"]}, "x")
    inner = parse_subset({"range": ["25%", "75%"]}, "x")
    assert merge_subset(inner, half, "x") == Subset(range=(0.25, 0.5))
    absolute = parse_subset({"range": [10, "end"]}, "x")
    merged = merge_subset(absolute, half, "x")
    assert merged.bounds(110, "x") == (10, 60)
    with pytest.raises(LoaderError, match="only allowed for a leaf dataset"):
        merge_subset(inner, absolute, "x")
    with pytest.raises(LoaderError, match="absolute end"):
        parse_subset({"range": [10, "50%"]}, "x")


def test_nested_metadatasets_subflavors_and_subsets(tmp_path, prepared_root):
    _write(
        tmp_path,
        "inner.yaml",
        f"""  train:
    blend:
      - path: {prepared_root}
        subset: {{range: [0, 40]}}
        subflavors: {{level: inner, who: inner}}
  val:
    path: {prepared_root}
    split_part: val
""",
    )
    outer = _write(
        tmp_path,
        "outer.yaml",
        """  train:
    path: inner.yaml
    subset: {range: ["0%", "25%"]}
    subflavors: {who: outer, extra: 1}
""",
    )
    seen = _epoch(outer, batch=5, split="val", split_part="train")
    assert sorted(k for k, _ in seen) == [f"000000_{i:06d}" for i in range(10)]
    assert {f for _, f in seen} == {(("extra", 1), ("level", "inner"), ("who", "outer"))}
    # the loader's own subflavors override everything
    seen = _epoch(outer, batch=5, split="val", split_part="train", subflavors={"who": "call"})
    assert {f for _, f in seen} == {(("extra", 1), ("level", "inner"), ("who", "call"))}


def test_metadataset_v1(tmp_path, prepared_root):
    path = _write(
        tmp_path,
        "v1.yaml",
        f"""  train:
    datasets:
      - weight: 3
        path: {prepared_root}
        subflavor: one
        subflavors: {{k: 1}}
      - path: {prepared_root}
        split_part: val
""",
        head="__module__: megatron.energon\n__class__: Metadataset\nsplits:\n",
    )
    resolved = resolve_split(path, "train")
    assert resolved.mode == "weight"
    assert [leaf.weight for leaf in resolved.leaves] == [0.75, 0.25]
    assert resolved.leaves[0].subflavors == {"__subflavor__": "one", "k": 1}
    assert resolved.leaves[1].split_part == "val"
    with pytest.raises(LoaderError, match="needs repeat=True"):
        _epoch(path)


def test_unknown_keys_name_file_line_and_key(tmp_path, prepared_root):
    path = _write(
        tmp_path,
        "typo.yaml",
        f"""  train:
    blend:
      - path: {prepared_root}
        weight: 1
      - path: {prepared_root}
        subsett: {{range: [0, 10]}}
""",
    )
    with pytest.raises(LoaderError, match=r"typo\.yaml: line 9: unknown key 'subsett' in blend entry"):
        resolve_split(path, "train")
    path = _write(tmp_path, "typo2.yaml", f"  train:\n    path: {prepared_root}\n    repetitions: 2\n")
    with pytest.raises(LoaderError, match=r"typo2\.yaml: line 6: unknown key 'repetitions'"):
        resolve_split(path, "train")


def test_cycles_and_mixed_modes_are_errors(tmp_path, prepared_root):
    _write(tmp_path, "a.yaml", "  train:\n    blend:\n      - path: b.yaml\n")
    _write(tmp_path, "b.yaml", "  train:\n    path: a.yaml\n")
    with pytest.raises(LoaderError, match=r"metadataset cycle: .*a\.yaml -> .*b\.yaml -> .*a\.yaml"):
        resolve_split(str(tmp_path / "a.yaml"), "train")
    _write(tmp_path, "ep.yaml", f"  train:\n    blend_epochized:\n      - path: {prepared_root}\n")
    _write(tmp_path, "mix.yaml", "  train:\n    blend:\n      - path: ep.yaml\n")
    with pytest.raises(LoaderError, match="cannot mix blend with blend_epochized"):
        resolve_split(str(tmp_path / "mix.yaml"), "train")


def test_prepare_metadataset_checks_datasets_and_drops_stale_join_indexes(tmp_path, prepared_root, capsys):
    (tmp_path / "m.yaml.cache").mkdir()
    (tmp_path / "m.yaml.cache" / "join_index_old.bin").write_bytes(b"x")
    path = _write(tmp_path, "m.yaml", f"  train:\n    path: {prepared_root}\n  val:\n    path: missing\n")
    with pytest.raises(LoaderError, match=r"m\.yaml: split 'val': .*missing is not a prepared dataset"):
        ea.prepare_metadataset(path)
    path = _write(tmp_path, "m.yaml", f"  train:\n    path: {prepared_root}\n")
    assert ea.prepare_metadataset(path) == []
    assert not (tmp_path / "m.yaml.cache" / "join_index_old.bin").exists()
    # `energon-arrow prepare m.yaml` is energon's `energon prepare m.yaml` (the documented join setup step)
    from energon_arrow.cli.main import main

    main(["prepare", path])
    assert "Preparing metadataset...\nPrepared" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        main(["prepare", str(tmp_path / "none.yaml")])
    assert exit_info.value.code == 1 and "none.yaml: metadataset not found" in capsys.readouterr().err
    with pytest.raises(LoaderError, match="does not support joined datasets"):
        _write(
            tmp_path,
            "j.yaml",
            f"  train:\n    join: [{{path: {prepared_root}}}]\n    joiner: {{__class__: TextSample}}\n",
        )
        ea.traverse_metadataset(str(tmp_path / "j.yaml"), split_part="train")


def test_epochized_schedule_is_exact_per_epoch_and_rank_independent():
    import numpy as np

    from energon_arrow.loader.epochized import EpochizedSchedule

    s = EpochizedSchedule([7, 5, 3], [1.0, 2.5, 0.4], global_batch_size=4, seed=3)
    assert s.epoch_length == 7 + 12 + 1
    slots = [s.slots(b, 0, 4) for b in range(3 * 20 // 4)]  # 3 epochs of 20
    owner = np.concatenate([o for o, _ in slots])
    pos = np.concatenate([p for _, p in slots])
    for e in range(3):
        o, p = owner[20 * e : 20 * (e + 1)], pos[20 * e : 20 * (e + 1)]
        assert np.bincount(o, minlength=3).tolist() == [7, 12, 1]
        assert sorted(p[o == 0] % 7) == list(range(7))  # every sample of the one pass
        second = p[o == 1]
        assert sorted(second // 5) == [3 * e] * 5 + [3 * e + 1] * 5 + [3 * e + 2] * 2  # passes 3e, 3e+1, 3e+2
    # two ranks of half a batch each see exactly the slots of the whole batch
    for b in range(5):
        whole = s.slots(b, 0, 4)
        halves = [s.slots(b, 0, 2), s.slots(b, 2, 4)]
        assert np.concatenate([h[0] for h in halves]).tolist() == whole[0].tolist()
        assert np.concatenate([h[1] for h in halves]).tolist() == whole[1].tolist()


def test_epochized_schedule_many_sources_batch_of_one_and_k_epoch_passes():
    """Three or more sources with batch size 1 (the apportioning is non-decreasing in the position), and passes of
    sources shuffled over k epochs (pass_lengths): every slot of an epoch is a distinct position."""
    import numpy as np

    from energon_arrow.loader.epochized import EpochizedSchedule

    s = EpochizedSchedule([10, 3, 3], [1.0, 2.0, 4.0], global_batch_size=1, seed=42)
    slots = [s.slots(b, 0, 1) for b in range(2 * 28)]
    owner = np.concatenate([o for o, _ in slots])
    pos = np.concatenate([p for _, p in slots])
    assert [np.bincount(owner[28 * e : 28 * (e + 1)], minlength=3).tolist() for e in range(2)] == [
        [10, 6, 12]
    ] * 2
    assert len(set(zip(owner.tolist(), pos.tolist()))) == 2 * 28
    k2 = EpochizedSchedule([4, 6], [1.5, 1.0], global_batch_size=3, seed=1, pass_lengths=[8, 6])
    assert (
        k2.epoch_length == 8 + 2 + 6
    )  # a whole repetition of a k=2 source is 2 * 4 samples, the half is 4 // 2
    slots = [k2.slots(b, 0, 3, 16) for b in range(6)]
    owner = np.concatenate([o for o, _ in slots])
    pos = np.concatenate([p for _, p in slots])
    assert sorted(pos[owner == 0].tolist()) == [*range(8), 8, 9]  # pass 0 (8 positions), then 2 of pass 1
