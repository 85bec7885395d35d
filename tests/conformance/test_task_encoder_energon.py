"""The same training script, with a typed task encoder, run on energon 7.4.1 and on energon-arrow (only the
import differs): the same samples per epoch, the same encoded values, the same batch types and sizes, the same
groups, the same unbatched samples and the same len(). The order within an epoch may differ (ours does not depend
on the worker count), so epochs are compared as multisets; val keeps energon's order."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

import energon_arrow as ea
from energon_arrow.testing.synthetic import write_webdataset
from tests.reference import energon_prepare

pytestmark = pytest.mark.conformance
energon = pytest.importorskip("megatron.energon")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("te-conf") / "ds")
    write_webdataset(path, shards=3, samples_per_shard=25, image_bytes=50)
    energon_prepare(path)
    return path


def make_task_encoder(mod, group: bool = False):
    """The user's task encoder, written against `mod` (megatron.energon or energon_arrow)."""

    @mod.edataclass
    class EncodedSample(mod.Sample):
        caption: str
        caption_len: int

    @mod.edataclass
    class CaptionBatch(mod.Batch):
        caption: list
        caption_len: torch.Tensor

    class CaptionTE(mod.DefaultTaskEncoder[mod.CaptioningSample, EncodedSample, CaptionBatch, CaptionBatch]):
        decoder = None  # raw bytes: the synthetic images are not real JPEGs

        def encode_sample(self, sample):
            caption = bytes(sample.caption).decode()
            return EncodedSample.derive_from(sample, caption=caption, caption_len=len(caption))

        def batch(self, samples):
            return CaptionBatch.from_samples(samples)

        def encode_batch(self, batch):
            return CaptionBatch.derive_from(
                batch, caption=batch.caption, caption_len=torch.tensor(batch.caption_len)
            )

    class GroupedTE(CaptionTE):
        def batch_group_criterion(self, sample):
            return sample.caption_len % 2, 2 + sample.caption_len % 2

    return GroupedTE() if group else CaptionTE()


def train_epoch(mod, root, *, batch_size, group=False, workers=0):
    wc = mod.WorkerConfig(rank=0, world_size=1, num_workers=workers)
    ds = mod.get_train_dataset(
        root,
        worker_config=wc,
        batch_size=batch_size,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        task_encoder=make_task_encoder(mod, group),
        repeat=False,
    )
    return list(mod.get_loader(ds))


def _rows(batches):
    return Counter((k, c, int(n)) for b in batches for k, c, n in zip(b.__key__, b.caption, b.caption_len))


def test_typed_task_encoder_same_epoch(root):
    ours, ref = train_epoch(ea, root, batch_size=4), train_epoch(energon, root, batch_size=4)
    assert {type(b).__name__ for b in ours} == {type(b).__name__ for b in ref} == {"CaptionBatch"}
    assert all(isinstance(b.caption_len, torch.Tensor) for b in ours)
    assert _rows(ours) == _rows(ref)
    assert sorted(len(b.__key__) for b in ours) == sorted(len(b.__key__) for b in ref)


def test_batch_group_criterion_same_groups(root):
    ours = train_epoch(ea, root, batch_size=None, group=True)
    ref = train_epoch(energon, root, batch_size=None, group=True, workers=0)
    assert _rows(ours) == _rows(ref)
    for b in ours:  # each batch holds one group
        assert len({int(n) % 2 for n in b.caption_len}) == 1

    def groups(batches):  # (group, batch size): full batches of each group plus its last partial one
        return Counter((int(b.caption_len[0]) % 2, len(b.__key__)) for b in batches)

    assert groups(ours) == groups(ref)


def test_unbatched_same_samples(root):
    ours = train_epoch(ea, root, batch_size=None)
    ref = train_epoch(energon, root, batch_size=None)
    assert {type(s).__name__ for s in ours} == {type(s).__name__ for s in ref} == {"EncodedSample"}
    assert Counter((s.__key__, s.caption_len) for s in ours) == Counter(
        (s.__key__, s.caption_len) for s in ref
    )


def test_val_same_order_with_task_encoder(root):
    def val(mod):
        wc = mod.WorkerConfig(rank=0, world_size=1, num_workers=0)
        ds = mod.get_val_dataset(root, worker_config=wc, batch_size=3, task_encoder=make_task_encoder(mod))
        return [(b.__key__, b.caption_len.tolist()) for b in mod.get_loader(ds)]

    assert val(ea) == val(energon)


@pytest.mark.parametrize(
    "world,workers,batch,drop_last",
    [(1, 0, 4, False), (1, 4, 11, False), (2, 2, 3, True), (3, 1, 5, False), (2, 3, None, False)],
)
def test_train_len_same(root, world, workers, batch, drop_last):
    def lengths(mod, rank):
        wc = mod.WorkerConfig(rank=rank, world_size=world, num_workers=workers)
        ds = mod.get_train_dataset(
            root,
            worker_config=wc,
            batch_size=batch,
            batch_drop_last=drop_last,
            shuffle_buffer_size=None,
            max_samples_per_sequence=None,
            task_encoder=make_task_encoder(mod),
        )
        return len(ds), len(mod.get_loader(ds))

    for rank in range(world):
        assert lengths(ea, rank) == lengths(energon, rank)


def test_grouped_train_len_same(root):
    def length(mod):
        wc = mod.WorkerConfig(rank=0, world_size=1, num_workers=2)
        ds = mod.get_train_dataset(
            root,
            worker_config=wc,
            batch_size=None,
            shuffle_buffer_size=None,
            max_samples_per_sequence=None,
            task_encoder=make_task_encoder(mod, group=True),
        )
        return len(ds)

    assert length(ea) == length(energon)


def test_virtual_epoch_len_same(root):
    def length(mod):
        class RawTE(mod.DefaultTaskEncoder):  # batches of a module-level type: workers pickle them
            decoder = None

        wc = mod.WorkerConfig(rank=0, world_size=1, num_workers=2)
        ds = mod.get_train_dataset(
            root,
            worker_config=wc,
            batch_size=11,
            virtual_epoch_length=12,
            shuffle_buffer_size=None,
            max_samples_per_sequence=None,
            task_encoder=RawTE(),
        )
        loader = mod.get_loader(ds)
        return len(ds), len(loader), len(list(loader))

    assert length(ea) == length(energon) == (12, 12, 12)
