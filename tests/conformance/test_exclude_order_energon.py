"""split.yaml `exclude:` entries naming single samples: energon 7.4.1 keeps them in its index space (worker slices,
sequence shuffling and len() count them; the sample loader skips them as it reads them), so the batches of the
energon API must be energon's for train (shuffled) and val, and len() must be energon's too."""

from __future__ import annotations

import itertools

import pytest

import energon_arrow as ea
from energon_arrow.testing.synthetic import write_webdataset
from tests.reference import energon_prepare

pytestmark = pytest.mark.conformance
energon = pytest.importorskip("megatron.energon")

PER_SHARD = 13


def _sample(shard: int, i: int) -> str:
    return f"shards/shard-{shard:06d}.tar/{shard:06d}_{i:06d}"


#: single samples at shard starts and ends, around the 1- and 2-rank worker slice boundaries, in a row, and one whole
#: shard (000002); val (shards 4-6) shares the shard 4 exclusions
EXCLUDE = [
    "shards/shard-000002.tar",
    _sample(0, 0),
    _sample(0, 12),
    _sample(1, 5),
    _sample(3, 5),
    _sample(3, 6),
    _sample(3, 7),
    _sample(4, 0),
    _sample(4, 9),
    _sample(5, 12),
    _sample(6, 3),
    _sample(6, 12),
    "shards/shard-000005.tar/no_such_key",  # names no sample: excludes nothing
]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    base = tmp_path_factory.mktemp("exclorder")
    path = base / "ds"
    write_webdataset(str(path), shards=7, samples_per_shard=PER_SHARD, image_bytes=10)
    energon_prepare(str(path))
    excl = "".join(f"  - {e}\n" for e in EXCLUDE)
    (path / ".nv-meta" / "split.yaml").write_text(
        "split_parts:\n  train:\n    - shards/shard-{000000..000005}.tar\n"
        "  val:\n    - shards/shard-{000004..000006}.tar\n"
        f"exclude:\n{excl}"
    )
    (base / "epochized.yaml").write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    blend_epochized:\n"
        "      - repetitions: 1.5\n        path: ds\n      - repetitions: 1\n        path: ds\n"
        "        split_part: val\n"
    )
    (base / "subset.yaml").write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    blend:\n"
        "      - weight: 2\n        path: ds\n        subset: {range: [10%, 80%]}\n"
        "      - weight: 1\n        path: ds\n        split_part: val\n        subset: {range: [3, 30]}\n"
        "  val:\n    blend:\n      - weight: 1\n        path: ds\n        subset: {range: [20%, 90%]}\n"
    )
    return base


class _TE:
    def __init__(self, mod):
        class TE(mod.DefaultTaskEncoder):
            decoder = None

        self.te = TE()


def _train(mod, path, batches: int, rank=0, world=1, workers=0, **kw):
    wc = mod.WorkerConfig(rank=rank, world_size=world, num_workers=workers)
    ds = mod.get_train_dataset(
        str(path), worker_config=wc, batch_size=kw.pop("batch", 3), task_encoder=_TE(mod).te, **kw
    )
    keys = [tuple(b.__key__) for b in itertools.islice(mod.get_loader(ds), batches)]
    return len(ds), keys


def _val(mod, path, rank=0, world=1, workers=0, with_index=False, **kw):
    wc = mod.WorkerConfig(rank=rank, world_size=world, num_workers=workers)
    ds = mod.get_val_dataset(
        str(path), worker_config=wc, batch_size=kw.pop("batch", 4), task_encoder=_TE(mod).te, **kw
    )
    batches = list(mod.get_loader(ds))
    keys = [tuple(b.__key__) for b in batches]
    index = [tuple(s[0].index for s in b.__sources__) for b in batches] if with_index else None
    return len(ds), keys, index


def _excluded_keys() -> set[str]:
    return {e.rsplit("/", 1)[1] for e in EXCLUDE if not e.endswith(".tar")}


TRAIN = [
    dict(shuffle_buffer_size=None, max_samples_per_sequence=None),
    dict(shuffle_buffer_size=None, max_samples_per_sequence=4, workers=2),
    dict(shuffle_buffer_size=5, max_samples_per_sequence=4, workers=3, rank=1, world=2),
    dict(shuffle_buffer_size=5, max_samples_per_sequence=4, workers=2, rank=0, world=2),
    dict(shuffle_buffer_size=None, max_samples_per_sequence=4, parallel_shard_iters=1, workers=2),
    dict(shuffle_buffer_size=5, max_samples_per_sequence=None, repeat=False, workers=3),
    dict(shuffle_buffer_size=None, max_samples_per_sequence=5, repeat=False, world=2, rank=1),
    dict(shuffle_buffer_size=None, max_samples_per_sequence=3, shuffle_over_epochs_multiplier=2, workers=2),
]


@pytest.mark.parametrize("case", TRAIN, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_train_with_sample_excludes_same_batches_and_len_as_energon(root, case):
    batches = 10**6 if case.get("repeat") is False else 80
    ours = _train(ea, root / "ds", batches, **dict(case))
    ref = _train(energon, root / "ds", batches, **dict(case))
    assert ours[0] == ref[0]
    assert ours[1] == ref[1]
    seen = {k for b in ours[1] for k in b}
    assert not seen & _excluded_keys() and not any(k.startswith("000002_") for k in seen)


VAL = [
    dict(),
    dict(workers=2),
    dict(workers=3, rank=1, world=2),
    dict(workers=2, rank=0, world=2, batch=3),
    dict(workers=2, limit=3),
    dict(workers=2, with_index=True),
]


@pytest.mark.parametrize("case", VAL, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "plain")
def test_val_with_sample_excludes_same_batches_and_len_as_energon(root, case):
    ours, ref = _val(ea, root / "ds", **dict(case)), _val(energon, root / "ds", **dict(case))
    assert ours == ref
    assert not {k for b in ours[1] for k in b} & _excluded_keys()


@pytest.mark.parametrize("workers", [0, 2])
def test_blend_epochized_with_sample_excludes_same_batches_as_energon(root, workers):
    kw = dict(shuffle_buffer_size=4, max_samples_per_sequence=4, workers=workers, repeat=False)
    ours = _train(ea, root / "epochized.yaml", 10**6, **dict(kw))
    ref = _train(energon, root / "epochized.yaml", 10**6, **dict(kw))
    assert ours == ref


@pytest.mark.parametrize("workers", [0, 3])
def test_subset_with_sample_excludes_same_batches_as_energon(root, workers):
    kw = dict(shuffle_buffer_size=4, max_samples_per_sequence=4, workers=workers, world=2, rank=1)
    assert _train(ea, root / "subset.yaml", 60, **dict(kw)) == _train(
        energon, root / "subset.yaml", 60, **dict(kw)
    )
    val = dict(workers=workers, with_index=True)
    assert _val(ea, root / "subset.yaml", **dict(val)) == _val(energon, root / "subset.yaml", **dict(val))
