"""`__sources__` of loaded samples: energon's SourceInfo (index, shard, member names), per sample in a batch."""

from __future__ import annotations

import pytest

import energon_arrow as ea
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
