"""`loader.config()` of the energon API equals energon 7.4.1's for the same call (only the import differs):
train and val, a plain dataset and metadataset blends (weights, blend_epochized repetitions), 0 to 3 workers and
two ranks, shuffle buffer, virtual epochs, val limits, unbatched, custom / packing / grouping / pre- and
post-encoding task encoders, get_val_datasets."""

from __future__ import annotations

import pytest

import energon_arrow as ea
from energon_arrow.testing.synthetic import write_webdataset
from tests.reference import energon_prepare

pytestmark = pytest.mark.conformance
energon = pytest.importorskip("megatron.energon")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    base = tmp_path_factory.mktemp("config-conf")
    for name, shards, per in (("ds1", 3, 17), ("ds2", 4, 9)):
        write_webdataset(str(base / name), shards=shards, samples_per_shard=per, image_bytes=50)
        energon_prepare(str(base / name))
    head = "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n"
    (base / "blend.yaml").write_text(
        head + "  train:\n    blend:\n      - {weight: 2, path: ds1, subflavors: {a: 1}}\n"
        "      - {weight: 1, path: ds2, shuffle_over_epochs_multiplier: 3}\n"
        "  val:\n    blend:\n      - {path: ds1}\n      - {path: ds2}\n"
    )
    (base / "epochized.yaml").write_text(
        head + "  train:\n    blend_epochized:\n      - {repetitions: 2, path: ds1}\n"
        "      - {repetitions: 0.5, path: ds2}\n"
    )
    (base / "subset.yaml").write_text(
        head + "  train:\n    blend:\n      - {weight: 2, path: ds1, subset: {range: [10%, 70%]}}\n"
        "      - {weight: 1, path: ds2, subset: {range: [3, end]}}\n"
        "      - {weight: 1, path: ds2, subset: {range: [2, 20]}}\n"
    )
    return base


def _te(mod, kind: str):
    class Custom(mod.DefaultTaskEncoder):
        def encode_sample(self, sample):
            return sample

    class Packing(mod.DefaultTaskEncoder):
        def select_samples_to_pack(self, samples):
            return [samples]

        @mod.stateless
        def pack_selected_samples(self, samples):
            return samples[0]

    class Grouping(mod.DefaultTaskEncoder):
        def batch_group_criterion(self, sample):
            return "all", 3

        def batch(self, samples):
            return samples

    class PrePost(mod.DefaultTaskEncoder):
        def preencode_sample(self, sample):
            return sample

        def postencode_sample(self, sample):
            return sample

    return {"custom": Custom, "packing": Packing, "grouping": Grouping, "prepost": PrePost}[kind]()


def _wc(mod, workers=0, rank=0, world=1):
    return mod.WorkerConfig(rank=rank, world_size=world, num_workers=workers, seed_offset=42)


_TRAIN = dict(shuffle_buffer_size=None, max_samples_per_sequence=None)

CASES = {
    "blend": lambda mod, r: mod.get_savable_loader(
        mod.get_train_dataset(
            r / "blend.yaml", worker_config=_wc(mod), batch_size=5, parallel_shard_iters=2,
            shuffle_over_epochs_multiplier=2, **_TRAIN,
        )
    ),
    "subset_blend_3_workers": lambda mod, r: mod.get_savable_loader(
        mod.get_train_dataset(r / "subset.yaml", worker_config=_wc(mod, 3), batch_size=4, **_TRAIN)
    ),
    "plain_buffer_2_workers": lambda mod, r: mod.get_savable_loader(
        mod.get_train_dataset(
            r / "ds1", worker_config=_wc(mod, 2), batch_size=4, shuffle_buffer_size=10, max_samples_per_sequence=5
        )
    ),
    "virtual_epoch": lambda mod, r: mod.get_loader(
        mod.get_train_dataset(r / "ds2", worker_config=_wc(mod, 1), batch_size=4, virtual_epoch_length=7, **_TRAIN)
    ),
    "epochized_rank_1": lambda mod, r: mod.get_savable_loader(
        mod.get_train_dataset(
            r / "epochized.yaml", worker_config=_wc(mod, 2, 1, 2), batch_size=3, repeat=False,
            shuffle_buffer_size=None, max_samples_per_sequence=3,
        )
    ),
    "unbatched_finite": lambda mod, r: mod.get_savable_loader(
        mod.get_train_dataset(
            r / "ds2", worker_config=_wc(mod, 3, 1, 2), batch_size=None, repeat=False, parallel_shard_iters=3,
            shuffle_buffer_size=None, max_samples_per_sequence=2,
        )
    ),
    "val_limit": lambda mod, r: mod.get_savable_loader(
        mod.get_val_dataset(r / "ds1", worker_config=_wc(mod, 2), batch_size=4, limit=3)
    ),
    "val_blend_unbatched": lambda mod, r: mod.get_loader(
        mod.get_val_dataset(r / "blend.yaml", worker_config=_wc(mod), batch_size=None)
    ),
    "custom_encoder": lambda mod, r: mod.get_savable_loader(
        mod.get_train_dataset(
            r / "ds1", worker_config=_wc(mod, 1), batch_size=4, task_encoder=_te(mod, "custom"),
            shuffle_over_epochs_multiplier=None, **_TRAIN,
        )
    ),
    "packing": lambda mod, r: mod.get_savable_loader(
        mod.get_train_dataset(
            r / "ds1", worker_config=_wc(mod), batch_size=2, task_encoder=_te(mod, "packing"),
            packing_buffer_size=4, **_TRAIN,
        )
    ),
    "grouping": lambda mod, r: mod.get_savable_loader(
        mod.get_train_dataset(
            r / "blend.yaml", worker_config=_wc(mod, 2), batch_size=None, task_encoder=_te(mod, "grouping"), **_TRAIN
        )
    ),
    "prepost_val": lambda mod, r: mod.get_loader(
        mod.get_val_dataset(r / "ds2", worker_config=_wc(mod, 1), batch_size=2, task_encoder=_te(mod, "prepost"))
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_loader_config_equals_energons(root, case):
    build = CASES[case]
    assert build(ea, root).config() == build(energon, root).config()


def test_val_datasets_and_dataset_config_equal_energons(root):
    ours = [
        ds.config()
        for ds, _ in ea.get_val_datasets(root / "blend.yaml", worker_config=_wc(ea, 1), batch_size=2)
    ]
    ref = [
        ds.config()
        for ds, _ in energon.get_val_datasets(
            root / "blend.yaml", worker_config=_wc(energon, 1), batch_size=2
        )
    ]
    assert ours == ref
