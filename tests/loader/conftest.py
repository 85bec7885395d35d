"""Small prepared datasets for the loader tests (shards written by the synthetic generator, indexed by energon)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from energon_arrow.testing.synthetic import write_webdataset

SHARDS, PER_SHARD = 4, 40


def energon_prepare(root: str, split_ratio: str = "3,1,0", extra: tuple = ()) -> None:
    exe = shutil.which("energon")
    if exe is None:
        pytest.skip("energon CLI (test extra) not installed")
    cmd = [
        exe,
        "prepare",
        root,
        "--non-interactive",
        "--split-ratio",
        split_ratio,
        "--no-progress",
        "--sample-type",
        "CaptioningSample",
        "--field-map",
        '{"image": "jpg", "caption": "txt"}',
        *extra,
    ]
    subprocess.run(cmd, check=True, capture_output=True)


@pytest.fixture(scope="session")
def prepared_root(tmp_path_factory) -> str:
    """4 shards x 40 samples (jpg/txt/json), split 3 train shards : 1 val shard, CaptioningSample."""
    root = str(tmp_path_factory.mktemp("loader") / "ds")
    write_webdataset(root, shards=SHARDS, samples_per_shard=PER_SHARD, image_bytes=200)
    energon_prepare(root)
    from energon_arrow.query import open_dataset

    open_dataset(root).close()  # converts and publishes the side index once
    return root


@pytest.fixture
def dataset_copy(prepared_root, tmp_path):
    """A private copy of the prepared dataset, free to modify."""
    dst = str(tmp_path / "copy")
    shutil.copytree(prepared_root, dst)
    return dst


def write_dataset_yaml(root: str, text: str) -> None:
    with open(f"{root}/.nv-meta/dataset.yaml", "w") as f:
        f.write(text)
