"""Datasets prepared by energon 7.4.1's own CLI over generated shards (the query layer must read those)."""

from __future__ import annotations

import shutil

import pytest

from energon_arrow.testing.synthetic import write_webdataset
from tests.reference import energon_prepare

TEXT_DATASET_YAML = (
    "sample_type:\n  __module__: megatron.energon\n  __class__: TextSample\nfield_map:\n  text: txt\n"
)


def energon_prepare_text(root: str, split_ratio: str = "3,1,0") -> None:
    """Run `energon prepare` non-interactively and write a TextSample dataset.yaml (text <- txt)."""
    energon_prepare(root, split_ratio, "TextSample", '{"text": "txt"}')
    with open(f"{root}/.nv-meta/dataset.yaml", "w") as f:
        f.write(TEXT_DATASET_YAML)


def make_energon_dataset(
    root: str, shards: int = 4, samples: int = 12, seed: int = 0, split_ratio="3,1,0", image_bytes: int = 48
):
    write_webdataset(root, shards=shards, samples_per_shard=samples, image_bytes=image_bytes, seed=seed)
    energon_prepare_text(root, split_ratio)
    return root


@pytest.fixture(scope="session")
def energon_template(tmp_path_factory):
    """4 shards x 12 samples (jpg, txt, json), prepared by energon; copy it before changing anything."""
    return make_energon_dataset(str(tmp_path_factory.mktemp("energon-template") / "ds"))


@pytest.fixture
def energon_ds(energon_template, tmp_path):
    """A fresh copy of the energon-prepared dataset (no Parquet side index yet)."""
    root = str(tmp_path / "ds")
    shutil.copytree(energon_template, root)
    return root


def write_split(root: str, text: str) -> None:
    with open(f"{root}/.nv-meta/split.yaml", "w") as f:
        f.write(text)
