"""get_dataset_from_config / load_dataset and the per-worker core dataset they build."""

from __future__ import annotations

import itertools
import pathlib
from collections import Counter

import pytest

import energon_arrow as ea
from energon_arrow.energon.wrappers.slicing import worker_offsets
from energon_arrow.loader.errors import LoaderError
from tests.energon.wrappers.conftest import TRAIN_KEYS, VAL_KEYS, core, take, wc


def test_factory_len_type_and_val_order(prepared_root):
    factory = ea.get_dataset_from_config(
        prepared_root, split_part="val", training=False, worker_config=wc(), decoder=None
    )
    assert len(factory) == 40
    assert factory.__sample_type__ is ea.CaptioningSample
    ds = factory.build()
    assert len(ds) == 40
    samples = list(ea.get_loader(ds))
    assert [s.__key__ for s in samples] == VAL_KEYS
    first = samples[0]
    assert isinstance(first, ea.CaptioningSample)
    assert first.caption.startswith(b"sample 0 of shard 3")
    # the loader prefixes the worker that made the item (energon: its SavableDatasetWrapper prefix)
    assert first.__restore_key__ == ("PipelineWorker", 0, "Webdataset", "shards/shard-000003.tar", 0)
    # a second pass yields the same samples again
    assert [s.__key__ for s in ea.get_loader(ds)] == VAL_KEYS


def test_restore_sample_by_key(prepared_root):
    ds = core(prepared_root, wc(), "train")
    sample = ds.restore_sample(("Webdataset", "shards/shard-000001.tar", 7))
    assert sample.__key__ == "000001_000007"
    with pytest.raises(LoaderError, match="no sample 99 of shard"):
        ds.restore_sample(("Webdataset", "shards/shard-000001.tar", 99))


def test_sample_type_and_argument_errors(prepared_root):
    with pytest.raises(LoaderError, match="not a subclass of TextSample"):
        ea.get_dataset_from_config(prepared_root, worker_config=wc(), sample_type=ea.TextSample)
    with pytest.raises(LoaderError, match=r"unsupported argument\(s\) \['bogus'\]"):
        ea.get_dataset_from_config(prepared_root, worker_config=wc(), bogus=1)
    with pytest.raises(LoaderError, match="shuffle_over_epochs=2"):
        ea.get_dataset_from_config(prepared_root, worker_config=wc(), shuffle_over_epochs=2)
    with pytest.raises(LoaderError, match="worker_config is required"):
        ea.get_dataset_from_config(prepared_root, worker_config=None)
    with pytest.raises(LoaderError, match="JSONL"):
        ea.get_dataset_from_config("/data/x.jsonl", worker_config=wc())
    # energon's defaults are accepted; paths may be path objects
    assert (
        len(ea.get_dataset_from_config(pathlib.Path(prepared_root), split_part="val", worker_config=wc()))
        == 40
    )
    ea.get_dataset_from_config(
        prepared_root, worker_config=wc(), parallel_shard_iters=None, shuffle_over_epochs=1
    )


@pytest.mark.parametrize("workers", [1, 2])
def test_val_workers_cover_the_split_once(prepared_root, workers):
    ds = core(prepared_root, wc(workers), "val")
    assert sum(ds.len_worker(i) for i in range(workers)) == len(ds) == 40
    got = [s.__key__ for s in ea.get_loader(ds)]
    assert sorted(got) == VAL_KEYS and len(got) == 40


def test_ranks_split_the_samples(prepared_root):
    seen = []
    for rank in range(2):
        ds = core(prepared_root, wc(0, rank, 2), "val")
        seen += [s.__key__ for s in ea.get_loader(ds)]
    assert sorted(seen) == VAL_KEYS


def test_worker_offsets_match_energon_sharding():
    sharder = pytest.importorskip("megatron.energon.flavors.webdataset.sharder").Sharder
    from megatron.energon import WorkerConfig

    for n, world, workers, rotation in itertools.product([0, 7, 40, 101], [1, 3], [0, 2, 5], [0, 2]):
        for rank in range(world):
            ref = sharder.split_samples_to_workers(
                3,
                3 + n,
                WorkerConfig(rank=rank, world_size=world, num_workers=workers),
                rotation_offset=rotation,
            )
            assert worker_offsets(3, 3 + n, rank, world, workers, rotation) == list(ref)


def test_training_repeats_each_epoch_as_a_permutation(prepared_root):
    ds = core(prepared_root, wc(), "train", training=True, max_samples_per_sequence=5)
    it = iter(ds)
    epoch0 = [s.__key__ for s in take(it, 120)]
    epoch1 = [s.__key__ for s in take(it, 120)]
    assert sorted(epoch0) == sorted(epoch1) == TRAIN_KEYS
    assert epoch0 != epoch1  # a fresh order every epoch
    assert epoch0 != TRAIN_KEYS  # shuffled


def test_training_is_reproducible_and_seeded(prepared_root):
    def first(seed_offset):
        config = ea.WorkerConfig(rank=0, world_size=1, num_workers=0, seed_offset=seed_offset)
        return [s.__key__ for s in take(iter(core(prepared_root, config, "train", training=True)), 30)]

    assert first(0) == first(0)
    assert first(0) != first(1)


def test_training_blocks_keep_shard_runs(prepared_root):
    ds = core(prepared_root, wc(), "train", training=True, max_samples_per_sequence=10)
    order = [s.__key__ for s in take(iter(ds), 120)]
    # blocks of 10 consecutive samples of one shard are visited whole
    blocks = Counter(k[:6] + str(int(k[7:]) // 10) for k in order[:10])
    assert len(blocks) == 1


def test_load_dataset_plain_and_metadataset(prepared_root, tmp_path):
    loaded = ea.load_dataset(prepared_root).get_datasets(training=False, split_part="val", worker_config=wc())
    assert [len(d.dataset) for d in loaded.datasets] == [40]
    assert loaded.blend_mode.value == "none"
    mds = tmp_path / "mds.yaml"
    mds.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    blend:\n"
        f"      - path: {prepared_root}\n        weight: 2\n        subflavors: {{a: 1}}\n"
        f"      - path: {prepared_root}\n        split_part: val\n        subset: {{range: [0, 10]}}\n"
    )
    loaded = ea.load_dataset(str(mds)).get_datasets(
        training=True, split_part="train", worker_config=wc(), decoder=None
    )
    assert loaded.blend_mode.value == "dataset_weight"
    # weights normalised per blend level, as energon's DatasetBlend.get_datasets gives them
    assert [len(d.dataset) for d in loaded.datasets] == [120, 10]
    assert [d.weight for d in loaded.datasets] == pytest.approx([2 / 3, 1 / 3])
    sample = next(iter(loaded.datasets[0].dataset.build()))
    assert sample.__subflavors__ == {"a": 1}
    with pytest.raises(LoaderError, match="is a metadataset"):
        ea.get_dataset_from_config(str(mds), worker_config=wc())
