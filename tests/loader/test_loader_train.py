"""Training batches through the energon shims: shape, coverage, exact resume, elastic world size / workers."""

from __future__ import annotations

import json
import random

import pytest
import torch

import energon_arrow as ea
from energon_arrow.loader.errors import LoaderError
from tests.energon_order import global_order_train_dataset
from tests.loader.conftest import PER_SHARD

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


class RawTE(ea.DefaultTaskEncoder):
    decoder = None


def _loader(root, rank=0, world=1, workers=0, batch=4, seed=3, **kw):
    wc = ea.WorkerConfig(rank=rank, world_size=world, num_workers=workers, seed_offset=seed)
    ds = global_order_train_dataset(
        root,
        worker_config=wc,
        batch_size=batch,
        shuffle_buffer_size=8,
        max_samples_per_sequence=5,
        task_encoder=kw.pop("task_encoder", RawTE()),
        **kw,
    )
    return ea.get_savable_loader(ds)


def _take(loader, n):
    it = iter(loader)
    out = [next(it) for _ in range(n)]
    it.close()
    return out


def test_batches_have_energon_shape(prepared_root):
    (batch,) = _take(_loader(prepared_root, batch=5), 1)
    assert type(batch).__name__ == "CaptioningSample"
    assert len(batch.__key__) == 5 and all(isinstance(k, str) for k in batch.__key__)
    assert all(isinstance(x, bytes) for x in batch.image) and all(isinstance(x, bytes) for x in batch.caption)
    assert batch.caption[0].startswith(b"sample ")
    # energon prefixes the loader's position; ours: ("BasicLoader", "chunk", chunk, *sample keys)
    assert batch.__restore_key__[:3] == ("BasicLoader", "chunk", 0)
    assert [k[0] for k in batch.__restore_key__[3:]] == ["Webdataset"] * 5


def test_one_epoch_covers_the_train_split_once(prepared_root):
    n = 3 * PER_SHARD  # split 3,1,0 over 4 shards
    batches = _take(_loader(prepared_root, batch=4, workers=2), n // 4)
    keys = [k for b in batches for k in b.__key__]
    assert len(keys) == n and len(set(keys)) == n
    assert all(not k.startswith("000003_") for k in keys)  # the val shard stays out


def test_same_batches_from_energon_prepared_dataset(prepared_root, energon_prepared_root):
    ours = [(b.__key__, b.image) for b in _take(_loader(prepared_root), 8)]
    assert [(b.__key__, b.image) for b in _take(_loader(energon_prepared_root), 8)] == ours


def test_workers_do_not_change_the_sequence(prepared_root):
    ref = [b.__key__ for b in _take(_loader(prepared_root, workers=0), 12)]
    assert [b.__key__ for b in _take(_loader(prepared_root, workers=2), 12)] == ref
    assert [b.__key__ for b in _take(_loader(prepared_root, workers=3), 12)] == ref


@pytest.mark.heavy
def test_resume_at_random_points_and_twice_in_a_row(prepared_root):
    total = 70  # crosses epoch boundaries (30 batches per epoch)
    ref = [b.__key__ for b in _take(_loader(prepared_root, workers=2), total)]
    rng = random.Random(0)
    for _ in range(3):
        a, c = sorted(rng.sample(range(1, total), 2))
        first = _loader(prepared_root, workers=2)
        got = [b.__key__ for b in _take(first, a)]
        state = json.loads(json.dumps(first.save_state_rank()))  # plain JSON
        second = _loader(prepared_root, workers=1)
        second.restore_state_rank(state)
        got += [b.__key__ for b in _take(second, c - a)]
        third = _loader(prepared_root, workers=3)
        third.load_state_dict(second.state_dict())
        got += [b.__key__ for b in _take(third, total - c)]
        assert got == ref


def test_resume_across_world_size_change(prepared_root):
    """Global batch 8: world 1 x batch 8 == concat of world 2 x batch 4 (ranks in order), resumed mid-way."""
    ref = [b.__key__ for b in _take(_loader(prepared_root, batch=8, workers=2), 10)]
    ranks = [_loader(prepared_root, rank=r, world=2, batch=4, workers=1) for r in range(2)]
    head = [_take(ld, 4) for ld in ranks]
    states = [ld.state_dict() for ld in ranks]
    assert states[0] == states[1]
    got = [head[0][i].__key__ + head[1][i].__key__ for i in range(4)]
    single = _loader(prepared_root, batch=8, workers=3)
    single.load_state_dict(states[0])
    got += [b.__key__ for b in _take(single, 6)]
    assert got == ref


def test_state_mismatch_is_refused(prepared_root):
    state = _loader(prepared_root, batch=4).state_dict()
    other = _loader(prepared_root, batch=4, seed=4)
    with pytest.raises(LoaderError, match="different settings.*seed"):
        other.load_state_dict(state)


def test_resume_with_another_global_batch_size_continues_after_the_same_samples(prepared_root):
    """A state of 3 batches of 4 resumes in batches of 2 (or 6) after sample 12 (energon: a smaller micro batch,
    or `checkpoint redist` to another world size); 12 samples do not fill batches of 8: refused, naming why."""
    ref = [k for b in _take(_loader(prepared_root, batch=4), 8) for k in b.__key__]
    first = _loader(prepared_root, batch=4)
    _take(first, 3)
    state = first.save_state_rank()
    for batch in (2, 6):
        other = _loader(prepared_root, batch=batch)
        other.restore_state_rank(state)
        assert [k for b in _take(other, 12 // batch) for k in b.__key__] == ref[12:24]
    with pytest.raises(LoaderError, match="after 12 samples .* needs a size that divides 12"):
        _loader(prepared_root, batch=8).restore_state_rank(state)


def test_resume_of_a_blend_with_another_global_batch_size_is_refused(tmp_path, prepared_root):
    mds = tmp_path / "mds.yaml"
    mds.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    blend:\n"
        f"      - weight: 1\n        path: {prepared_root}\n      - weight: 1\n        path: {prepared_root}\n"
    )
    first = _loader(str(mds), batch=4)
    _take(first, 2)
    with pytest.raises(LoaderError, match="blend's sample order depends on the global batch size"):
        _loader(str(mds), batch=2).restore_state_rank(first.save_state_rank())


def test_decoded_fields_and_field_map_access(dataset_copy):
    from tests.loader.conftest import write_dataset_yaml

    write_dataset_yaml(
        dataset_copy,
        "sample_type: {__module__: megatron.energon, __class__: ImageClassificationSample}\n"
        "field_map: {image: 'png,jpg', label: 'json[label]', label_name: 'json[caption]'}\n",
    )
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
    te = ea.DefaultTaskEncoder()
    te.decoder = ea.PartDecoder(
        handlers={"jpg": lambda data: torch.frombuffer(bytearray(data), dtype=torch.uint8)}
    )
    ds = global_order_train_dataset(
        dataset_copy,
        worker_config=wc,
        batch_size=4,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        task_encoder=te,
    )
    (batch,) = _take(ea.get_loader(ds), 1)
    assert type(batch).__name__ == "ImageClassificationSample"
    assert batch.image.shape == (4, 200) and batch.image.dtype == torch.uint8  # stacked tensors
    assert all(isinstance(x, int) for x in batch.label)
    assert all(name.startswith("sample ") for name in batch.label_name)


def test_unsupported_arguments_fail_loudly(prepared_root):
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
    with pytest.raises(
        Exception, match=r"packing_buffer_size=4 needs the task encoder to define both select_samples_to_pack"
    ):
        global_order_train_dataset(prepared_root, worker_config=wc, batch_size=2, packing_buffer_size=4)
    with pytest.raises(Exception, match="unknown argument"):
        global_order_train_dataset(prepared_root, worker_config=wc, batch_size=2, bogus=1)


class PerSampleTE(RawTE):
    def encode_sample(self, sample):  # any override disables the column-wise path
        return sample


def test_columnar_and_per_sample_paths_agree(prepared_root, monkeypatch):
    from energon_arrow.loader import assemble

    built = []  # batches the columnar path finished (it may hand a batch to the per-sample path)
    columnar = assemble.columnar_batch
    monkeypatch.setattr(assemble, "columnar_batch", lambda *a: built.append(columnar(*a)) or built[-1])
    fast = _take(_loader(prepared_root, batch=6), 5)
    columnar_batches = len(built)
    assert columnar_batches >= 5  # workers=0: every batch of the fast loader went the columnar way
    slow = _take(_loader(prepared_root, batch=6, task_encoder=PerSampleTE()), 5)
    assert len(built) == columnar_batches  # ... and none of the per-sample loader's
    for a, b in zip(fast, slow):
        assert a == b


class Flaky(RawTE):
    @ea.stateless(failure_tolerance=2)
    def encode_sample(self, sample):
        if sample.__key__.endswith(("_000003", "_000004")):
            raise ValueError("flaky")
        return sample


class Noisy(RawTE):
    @ea.stateless(restore_seeds=True)
    def encode_sample(self, sample):
        sample.caption = torch.rand(1).item()
        return sample


def test_stateless_failure_tolerance(prepared_root):
    loader = _loader(prepared_root, batch=4, task_encoder=Flaky())
    with pytest.raises(LoaderError, match=r"failed 2 times in a row \(failure_tolerance=2\)"):
        _take(loader, 40)


def test_stateless_restore_seeds_reproduce_randomness(prepared_root):
    ref = [b.caption for b in _take(_loader(prepared_root, task_encoder=Noisy()), 6)]
    first = _loader(prepared_root, task_encoder=Noisy())
    _take(first, 3)
    second = _loader(prepared_root, task_encoder=Noisy(), workers=2)
    second.load_state_dict(first.state_dict())
    assert [b.caption for b in _take(second, 3)] == ref[3:]


def test_without_max_samples_per_sequence_runs_of_16_come_in_shard_order(prepared_root):
    """energon reads a sequence sequentially when max_samples_per_sequence is None: our blocks of 16 keep table
    order (and the blocks are still shuffled)."""
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = global_order_train_dataset(
        prepared_root,
        worker_config=wc,
        batch_size=16,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        task_encoder=RawTE(),
        repeat=False,
    )
    keys = [(int(k[:6]), int(k[7:])) for b in ea.get_loader(ds) for k in b.__key__]
    assert sorted(keys) != keys and len(set(keys)) == len(keys)
    run_starts = [b for a, b in zip([None, *keys], keys) if a is None or b != (a[0], a[1] + 1)]
    # every run of consecutive samples starts at a block of 16 (shards of 40: blocks at 0, 16, 32)
    assert {i % PER_SHARD for _, i in run_starts} <= {0, 16, 32}, run_starts
