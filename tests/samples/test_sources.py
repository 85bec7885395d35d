"""`__sources__` of loaded samples: energon's SourceInfo (index, shard, member names), per sample in a batch."""

from __future__ import annotations

import pytest

import energon_arrow as ea
from energon_arrow.epathlib import EPath
from energon_arrow.loader.filestore import FolderStore, open_file_store
from energon_arrow.samples.sample import SourceInfo
from energon_arrow.testing.synthetic import write_webdataset
from tests.reference import energon_prepare

energon = pytest.importorskip("megatron.energon")


@pytest.fixture(scope="module")
def small_root(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("sources") / "ds")
    write_webdataset(root, shards=2, samples_per_shard=3, image_bytes=20)
    energon_prepare(
        root, split_ratio="1,0,0"
    )  # CaptioningSample {image: jpg, caption: txt}, both shards in train
    return root


def _first_val_batch(mod, root):
    class TE(mod.DefaultTaskEncoder):
        decoder = None

    wc = mod.WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = mod.get_val_dataset(root, worker_config=wc, batch_size=6, task_encoder=TE(), split_part="train")
    return next(iter(mod.get_loader(ds)))


def _plain(sources):
    return [
        [(str(s.dataset_path), s.index, s.shard_name, s.file_names) for s in per_sample]
        for per_sample in sources
    ]


class PerSample(ea.DefaultTaskEncoder):
    decoder = None

    @ea.stateless
    def encode_sample(self, sample):  # the per-sample path (the default encoder batches column-wise)
        return sample


def test_batch_sources_match_energon(small_root):
    ref = _first_val_batch(energon, small_root)
    ours = _first_val_batch(ea, small_root)
    assert ours.__key__ == ref.__key__
    assert _plain(ours.__sources__) == _plain(ref.__sources__)
    assert [s[0].index for s in ours.__sources__] == list(range(6))  # the position in the split, over shards
    assert all(isinstance(s, SourceInfo) for per_sample in ours.__sources__ for s in per_sample)
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = ea.get_val_dataset(
        small_root, worker_config=wc, batch_size=6, task_encoder=PerSample(), split_part="train"
    )
    slow = next(iter(ea.get_loader(ds)))
    assert slow.__sources__ == ours.__sources__


def test_dataset_path_is_one_epath_per_dataset_as_energon(small_root):
    """energon's SourceInfo.dataset_path is an EPath (the dataset's root), for samples and file-store reads."""
    ref = _first_val_batch(energon, small_root).__sources__[0][0].dataset_path
    ours = [s for per_sample in _first_val_batch(ea, small_root).__sources__ for s in per_sample]
    assert type(ref).__name__ == "EPath" and all(isinstance(s.dataset_path, EPath) for s in ours)
    assert ours[0].dataset_path == EPath(small_root) and len({id(s.dataset_path) for s in ours}) == 1
    part = open_file_store(small_root)
    key = ours[0].file_names[0]
    assert part[key][1].dataset_path == EPath(small_root)
    assert isinstance(part.get_path(), str)  # energon's get_path() is a str
    folder = FolderStore(small_root)
    assert folder[".nv-meta/dataset.yaml"][1].dataset_path == EPath(small_root)
