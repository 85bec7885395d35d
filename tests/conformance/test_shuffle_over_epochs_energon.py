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


def _epochized(tmp_path, root, name, entries):
    mds = tmp_path / name
    blend = "".join(
        f"      - {{path: {root}, repetitions: {r}, subset: {{range: [{a}, {b}]}}}}\n" for r, a, b in entries
    )
    mds.write_text(
        f"__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    blend_epochized:\n{blend}"
    )
    return str(mds)


def test_blend_epochized_without_shuffling_is_energons(root, tmp_path):
    # fractional repetitions take the first samples of one more pass, in the split's order
    mds = _epochized(tmp_path, root, "none.yaml", [(0.7, 0, 10), (1.5, 10, 20)])
    ours = pass_keys(ea, mds, None, parallel_shard_iters=1)
    ref = pass_keys(energon, mds, None, parallel_shard_iters=1)
    assert len(ours) == 7 + 10 + 5 and Counter(ours) == Counter(ref)


@pytest.mark.parametrize("multiplier", [2, 3])
def test_blend_epochized_repetitions_span_k_epochs(root, tmp_path, multiplier):
    # each whole repetition of a source shuffled over k epochs holds every sample k times, as energon's
    mds = _epochized(tmp_path, root, "k.yaml", [(1, 0, 10), (2, 10, 20)])
    ours, ref = pass_keys(ea, mds, multiplier), pass_keys(energon, mds, multiplier)
    assert Counter(ours) == Counter(ref)
    assert len(ours) == multiplier * (10 + 2 * 10)
    # a fractional repetition adds floor(frac * n) samples of one more k-epoch pass
    frac = _epochized(tmp_path, root, "kfrac.yaml", [(1.5, 0, 10)])
    assert (
        len(pass_keys(ea, frac, multiplier))
        == len(pass_keys(energon, frac, multiplier))
        == multiplier * 10 + 5
    )
