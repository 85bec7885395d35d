"""Small prepared datasets for the loader tests (shards written by the synthetic generator, indexed by energon)."""

from __future__ import annotations

import shutil

import pytest

from energon_arrow.testing.synthetic import write_webdataset
from tests.reference import energon_prepare

SHARDS, PER_SHARD = 4, 40


def prepare(root: str, storage_options: dict | None = None, split_ratio: str = "3,1,0") -> None:
    """energon-arrow prepare: CaptioningSample {image: jpg, caption: txt}."""
    from energon_arrow.index.prepare import PrepareOptions, prepare_dataset
    from energon_arrow.meta import field_map_dataset, parse_split_ratio

    options = PrepareOptions(
        split_ratio=parse_split_ratio(split_ratio),
        dataset_yaml=field_map_dataset("CaptioningSample", {"image": "jpg", "caption": "txt"}),
        num_workers=1,
    )
    prepare_dataset(root, options, storage_options)


@pytest.fixture(scope="session")
def prepared_root(tmp_path_factory) -> str:
    """4 shards x 40 samples (jpg/txt/json), split 3 train shards : 1 val shard, CaptioningSample."""
    root = str(tmp_path_factory.mktemp("loader") / "ds")
    write_webdataset(root, shards=SHARDS, samples_per_shard=PER_SHARD, image_bytes=200)
    prepare(root)
    return root


@pytest.fixture(scope="session")
def energon_prepared_root(tmp_path_factory) -> str:
    """The same shards prepared by energon 7.4.1 itself (index.sqlite only, no Parquet side index)."""
    root = str(tmp_path_factory.mktemp("loader-energon") / "ds")
    write_webdataset(root, shards=SHARDS, samples_per_shard=PER_SHARD, image_bytes=200)
    energon_prepare(root)
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


def first_batch(root, te=None, workers=0, **kw):
    """The first batch of `get_train_dataset(root, batch_size=4, ...)` through `get_loader`."""
    import energon_arrow as ea

    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=workers)
    ds = ea.get_train_dataset(root, worker_config=wc, batch_size=4, task_encoder=te, **kw)
    it = iter(ea.get_loader(ds))
    try:
        return next(it)
    finally:
        it.close()
