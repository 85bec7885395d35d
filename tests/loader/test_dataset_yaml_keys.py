"""A dataset.yaml's energon keys reach every entry point: `split_config` (its exclusions applied), `split_part`,
errors naming file, line and key for unknown or unsupported keys, and user sample types imported by module."""

from __future__ import annotations

import json
import sys
import types

import pytest
from click.testing import CliRunner

import energon_arrow as ea
from energon_arrow.loader.errors import LoaderError
from energon_arrow.meta import MetaError
from tests.loader.conftest import PER_SHARD, write_dataset_yaml

WC = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
TEXT_YAML = "sample_type:\n  __module__: megatron.energon\n  __class__: TextSample\n"
FIELD_MAP = "field_map:\n  text: txt\n"


def _write(root: str, name: str, text: str) -> None:
    with open(f"{root}/.nv-meta/{name}", "w") as f:
        f.write(text)


def _train_keys(root: str) -> list[str]:
    ds = ea.get_val_dataset(root, split_part="train", worker_config=WC, batch_size=None)
    return [s.__key__ for s in ea.get_loader(ds)]


@pytest.fixture
def excluding(dataset_copy):
    """dataset_exclude.yaml names split2.yaml: split.yaml plus the first train shard and 5 samples of the second
    excluded. Returns (root, the keys the train split keeps)."""
    root = dataset_copy
    write_dataset_yaml(root, TEXT_YAML + FIELD_MAP)
    keys = _train_keys(root)
    first, second = keys[0].split("_")[0], keys[PER_SHARD].split("_")[0]
    with open(f"{root}/.nv-meta/split.yaml") as f:
        split = f.read().replace("exclude: []", "")
    _write(
        root,
        "split2.yaml",
        split
        + f"exclude:\n- shards/shard-{first}.tar\n- shards/shard-{second}.tar/{second}_{{000000..000004}}\n",
    )
    _write(root, "dataset_exclude.yaml", TEXT_YAML + FIELD_MAP + "split_config: split2.yaml\n")
    kept = [k for k in keys[PER_SHARD + 5 :]]
    assert len(kept) == len(keys) - PER_SHARD - 5
    return root, kept


def test_split_config_named_by_the_dataset_yaml_applies_its_exclusions(excluding):
    root, kept = excluding
    cfg = dict(dataset_config="dataset_exclude.yaml", split_part="train", worker_config=WC)
    factory = ea.get_dataset_from_config(root, training=False, **cfg)
    assert len(factory) == len(kept)
    assert [s.__key__ for s in ea.get_loader(factory.build())] == kept
    # the yaml's split_config wins over the argument, as in energon
    assert len(ea.get_dataset_from_config(root, training=False, split_config="split.yaml", **cfg)) == len(
        kept
    )
    val = ea.get_val_dataset(
        root, dataset_config="dataset_exclude.yaml", split_part="train", worker_config=WC
    )
    assert [s.__key__ for s in ea.get_loader(val)] == kept
    train = ea.get_train_dataset(
        root, dataset_config="dataset_exclude.yaml", worker_config=WC, batch_size=None, repeat=False
    )
    assert sorted(s.__key__ for s in ea.get_loader(train)) == sorted(kept)
    loaded = ea.load_dataset(root, dataset_config="dataset_exclude.yaml").get_datasets(
        training=False, split_part="train", worker_config=WC
    )
    assert len(loaded.datasets[0].dataset) == len(kept)


def test_lint_dataset_config_uses_the_split_config_it_names(excluding):
    from energon_arrow.cli.lint import command

    root, kept = excluding
    args = [
        root,
        "--split-parts",
        "train",
        "--dataset-config",
        "dataset_exclude.yaml",
        "--json",
        "--no-progress",
    ]
    result = CliRunner().invoke(command, args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output[result.output.index("{") :])["samples"] == len(kept)


def test_split_part_in_the_dataset_yaml_wins(dataset_copy):
    _write(dataset_copy, "dataset_val.yaml", TEXT_YAML + FIELD_MAP + "split_part: val\n")
    factory = ea.get_dataset_from_config(
        dataset_copy, dataset_config="dataset_val.yaml", split_part="train", training=False, worker_config=WC
    )
    assert len(factory) == PER_SHARD  # the val shard


def test_unknown_and_unsupported_dataset_yaml_keys_name_file_line_and_key(dataset_copy):
    write_dataset_yaml(dataset_copy, TEXT_YAML + FIELD_MAP + "split_configs: split2.yaml\n")
    with pytest.raises(MetaError, match=r"dataset\.yaml:6: unknown key 'split_configs'"):
        ea.get_train_dataset(dataset_copy, worker_config=WC, batch_size=2)
    write_dataset_yaml(dataset_copy, TEXT_YAML + FIELD_MAP + "max_samples_per_sequence: 4\n")
    with pytest.raises(LoaderError, match=r"dataset\.yaml:6: max_samples_per_sequence: not supported"):
        ea.get_train_dataset(dataset_copy, worker_config=WC, batch_size=2)
    write_dataset_yaml(dataset_copy, TEXT_YAML + "sample_loader: x.py:f\npart_filter: x.py:g\n" + FIELD_MAP)
    with pytest.raises(MetaError, match="sample_loader: give a 'field_map' or a 'sample_loader', not both"):
        ea.get_train_dataset(dataset_copy, worker_config=WC, batch_size=2)
    crude = "__module__: megatron.energon\n__class__: CrudeWebdataset\n" + FIELD_MAP
    write_dataset_yaml(dataset_copy, crude)
    with pytest.raises(MetaError, match=r"dataset\.yaml:3: field_map: CrudeWebdataset takes no field_map"):
        ea.get_train_dataset(dataset_copy, worker_config=WC, batch_size=2)
    write_dataset_yaml(dataset_copy, TEXT_YAML + FIELD_MAP + "parallel_shard_iters: 4\n")  # no effect here
    assert len(ea.get_val_dataset(dataset_copy, split_part="train", worker_config=WC)) == 3 * PER_SHARD


USER_MODULE = """
from energon_arrow import Sample, edataclass


@edataclass
class CaptionSample(Sample):
    text: str
    note: str = "none"
"""


def test_user_sample_type_is_imported_from_the_working_directory(dataset_copy, tmp_path, monkeypatch):
    (tmp_path / "ea_user_caption_module.py").write_text(USER_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "ea_user_caption_module", raising=False)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    own = "sample_type:\n  __module__: ea_user_caption_module\n  __class__: CaptionSample\n"
    write_dataset_yaml(dataset_copy, own + FIELD_MAP)
    sample = next(iter(ea.get_loader(ea.get_val_dataset(dataset_copy, split_part="train", worker_config=WC))))
    assert type(sample).__name__ == "CaptionSample" and type(sample).__module__ == "ea_user_caption_module"
    assert sample.note == "none" and isinstance(sample.text, str)

    write_dataset_yaml(dataset_copy, own.replace("ea_user_caption_module", "ea_no_such_module") + FIELD_MAP)
    with pytest.raises(
        LoaderError, match=r"dataset\.yaml:1: sample_type: cannot import module 'ea_no_such_module'"
    ):
        ea.get_val_dataset(dataset_copy, split_part="train", worker_config=WC)
    write_dataset_yaml(dataset_copy, own.replace("CaptionSample", "Nope") + FIELD_MAP)
    with pytest.raises(
        LoaderError, match=r"dataset\.yaml:1: sample_type: module 'ea_user_caption_module' .* no 'Nope'"
    ):
        ea.get_val_dataset(dataset_copy, split_part="train", worker_config=WC)


def test_user_sample_type_from_the_running_script(dataset_copy, monkeypatch):
    script = types.ModuleType("__main__")
    script.__file__ = "/somewhere/train_script.py"
    exec(USER_MODULE, script.__dict__)
    monkeypatch.setitem(sys.modules, "__main__", script)
    for module in ("__main__", "train_script"):  # by name: the running script, not a second import of it
        own = f"sample_type:\n  __module__: {module}\n  __class__: CaptionSample\n"
        write_dataset_yaml(dataset_copy, own + FIELD_MAP)
        ds = ea.get_val_dataset(dataset_copy, split_part="train", worker_config=WC)
        assert type(next(iter(ea.get_loader(ds)))) is script.CaptionSample
