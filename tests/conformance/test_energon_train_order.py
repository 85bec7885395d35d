"""energon-arrow's energon API trains in energon 7.4.1's own order: the same keys in the same batches, for
several worker layouts, shuffle settings, a metadataset blend and blend_epochized (energon/train_order.py)."""

from __future__ import annotations

import itertools

import pytest

import energon_arrow as ea
from energon_arrow.testing.synthetic import write_webdataset
from tests.reference import energon_prepare

pytestmark = pytest.mark.conformance
energon = pytest.importorskip("megatron.energon")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    base = tmp_path_factory.mktemp("order")
    for name, shards in (("a", 7), ("b", 3)):
        write_webdataset(str(base / name), shards=shards, samples_per_shard=23, image_bytes=10)
        energon_prepare(str(base / name))
    (base / "blend.yaml").write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    blend:\n"
        "      - weight: 2\n        path: a\n      - weight: 1\n        path: b\n"
    )
    (base / "epochized.yaml").write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    blend_epochized:\n"
        "      - repetitions: 1.5\n        path: a\n      - repetitions: 2\n        path: b\n"
    )
    (base / "subset.yaml").write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    blend:\n"
        "      - weight: 2\n        path: a\n        subset: {range: [0%, 40%]}\n      - weight: 1\n        path: b\n"
        "      - weight: 1\n        path: b\n        subset: {range: [5, 40]}\n"
    )
    return base


def _keys(mod, path, batches: int, rank=0, world=1, workers=0, **kw):
    class TE(mod.DefaultTaskEncoder):
        decoder = None

    wc = mod.WorkerConfig(rank=rank, world_size=world, num_workers=workers)
    ds = mod.get_train_dataset(
        str(path), worker_config=wc, batch_size=kw.pop("batch", 3), task_encoder=TE(), **kw
    )
    return [tuple(b.__key__) for b in itertools.islice(mod.get_loader(ds), batches)]


CASES = [
    dict(shuffle_buffer_size=None, max_samples_per_sequence=None),
    dict(shuffle_buffer_size=None, max_samples_per_sequence=5),
    dict(shuffle_buffer_size=10, max_samples_per_sequence=5),
    dict(shuffle_buffer_size=10, max_samples_per_sequence=5, workers=2, rank=1, world=2),
    dict(shuffle_buffer_size=10, max_samples_per_sequence=5, repeat=False),
    dict(shuffle_buffer_size=10, max_samples_per_sequence=5, parallel_shard_iters=1),
    dict(shuffle_buffer_size=10, max_samples_per_sequence=5, shuffle_over_epochs_multiplier=2),
    dict(shuffle_buffer_size=10, max_samples_per_sequence=5, shuffle_over_epochs_multiplier=-1),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_one_dataset_same_batches_as_energon(root, case):
    assert _keys(ea, root / "a", 120, **dict(case)) == _keys(energon, root / "a", 120, **dict(case))


@pytest.mark.parametrize("mds", ["blend.yaml", "epochized.yaml", "subset.yaml"])
@pytest.mark.parametrize("workers", [0, 3])
def test_metadataset_same_batches_as_energon(root, mds, workers):
    kw = dict(shuffle_buffer_size=7, max_samples_per_sequence=4, workers=workers, world=2, rank=1)
    assert _keys(ea, root / mds, 150, **dict(kw)) == _keys(energon, root / mds, 150, **dict(kw))


def test_epochized_without_repeat_same_batches_as_energon(root):
    kw = dict(shuffle_buffer_size=7, max_samples_per_sequence=4, workers=2, repeat=False)
    ours, ref = (
        _keys(ea, root / "epochized.yaml", 10**6, **dict(kw)),
        _keys(energon, root / "epochized.yaml", 10**6, **dict(kw)),
    )
    assert ours == ref and len(ours) > 10
