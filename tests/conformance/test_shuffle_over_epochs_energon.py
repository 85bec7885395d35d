"""shuffle_over_epochs_multiplier on energon 7.4.1 and on energon-arrow: a finite training pass (repeat=False)
with k > 1 holds every sample k times on both (the order differs, see docs/migration.md); None keeps the
split's order on both."""

from __future__ import annotations

from collections import Counter

import pytest

import energon_arrow as ea
from energon_arrow.testing.synthetic import write_webdataset
from tests.reference import energon_prepare

pytestmark = pytest.mark.conformance
energon = pytest.importorskip("megatron.energon")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("soe-conf") / "ds")
    write_webdataset(path, shards=3, samples_per_shard=10, image_bytes=50)
    energon_prepare(path)
    return path


def pass_keys(mod, root, multiplier, **kw):
    class Raw(mod.DefaultTaskEncoder):
        decoder = None

    wc = mod.WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = mod.get_train_dataset(
        root,
        worker_config=wc,
        batch_size=3,
        shuffle_buffer_size=None,
        max_samples_per_sequence=2,
        shuffle_over_epochs_multiplier=multiplier,
        task_encoder=Raw(),
        repeat=False,
        **kw,
    )
    return [k for batch in mod.get_loader(ds) for k in batch.__key__]


@pytest.mark.parametrize("multiplier", [1, 2, 3])
def test_finite_pass_spans_k_epochs(root, multiplier):
    ours, ref = pass_keys(ea, root, multiplier), pass_keys(energon, root, multiplier)
    assert Counter(ours) == Counter(ref)
    assert set(Counter(ours).values()) == {multiplier}


def test_none_keeps_the_split_order(root):
    # energon needs one open shard iterator per worker when it does not shuffle
    assert pass_keys(ea, root, None, parallel_shard_iters=1) == pass_keys(
        energon, root, None, parallel_shard_iters=1
    )


def test_metadataset_multiplier_combines_with_the_argument(root, tmp_path):
    mds = tmp_path / "mds.yaml"
    mds.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n"
        f"  train:\n    path: {root}\n    shuffle_over_epochs_multiplier: 2\n"
    )
    ours, ref = pass_keys(ea, str(mds), 2), pass_keys(energon, str(mds), 2)
    assert Counter(ours) == Counter(ref)
    assert set(Counter(ours).values()) == {4}
