"""energon 7.4.1 and energon-arrow load the same prepared dataset into batches of the same shape and fields,
with the same keys per epoch (train) and the same keys in the same order (val)."""

from __future__ import annotations

import dataclasses
import shutil

import pytest

import energon_arrow as ea
from energon_arrow.testing.synthetic import write_webdataset
from tests.reference import energon_prepare

pytestmark = pytest.mark.conformance
energon = pytest.importorskip("megatron.energon")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("conf") / "ds")
    write_webdataset(path, shards=4, samples_per_shard=30, image_bytes=100)
    energon_prepare(path)
    return path


def _batches(mod, path, split, decoded: bool, batch=4):
    class TE(mod.DefaultTaskEncoder):
        pass

    if not decoded:
        TE.decoder = None
    wc = mod.WorkerConfig(rank=0, world_size=1, num_workers=0)
    if split == "train":
        ds = mod.get_train_dataset(
            path,
            worker_config=wc,
            batch_size=batch,
            shuffle_buffer_size=10,
            max_samples_per_sequence=5,
            task_encoder=TE(),
            repeat=False,
        )
    else:
        ds = mod.get_val_dataset(path, worker_config=wc, batch_size=batch, task_encoder=TE())
    return list(mod.get_loader(ds))


def _shape(batch):
    return (
        type(batch).__name__,
        {f.name for f in dataclasses.fields(batch)} - {"__sources__"},
        {
            f.name: type(getattr(batch, f.name)).__name__
            for f in dataclasses.fields(batch)
            if f.name != "__sources__"
        },
        {f: type(getattr(batch, f)[0]).__name__ for f in ("__key__", "image", "caption")},
        len(batch.__key__),
    )


def test_train_epoch_same_shape_and_key_set(root):
    ours = _batches(ea, root, "train", decoded=False)
    ref = _batches(energon, root, "train", decoded=False)
    assert _shape(ours[0]) == _shape(ref[0])
    assert sorted(k for b in ours for k in b.__key__) == sorted(k for b in ref for k in b.__key__)
    assert len(ours) == len(ref)


def test_val_same_keys_in_order_and_same_payloads(root):
    ours = _batches(ea, root, "val", decoded=False, batch=7)
    ref = _batches(energon, root, "val", decoded=False, batch=7)
    assert [b.__key__ for b in ours] == [b.__key__ for b in ref]
    assert [b.image for b in ours] == [b.image for b in ref]
    assert [b.caption for b in ours] == [b.caption for b in ref]


def test_decoded_text_same(root, tmp_path):
    copy = str(tmp_path / "txt")
    shutil.copytree(root, copy)
    with open(f"{copy}/.nv-meta/dataset.yaml", "w") as f:
        f.write(
            "sample_type: {__module__: megatron.energon, __class__: TextSample}\nfield_map: {text: txt}\n"
        )
    shutil.rmtree(f"{copy}/.nv-meta/arrow", ignore_errors=True)
    ours = _batches(ea, copy, "val", decoded=True)
    ref = _batches(energon, copy, "val", decoded=True)
    assert type(ours[0]).__name__ == type(ref[0]).__name__ == "TextSample"
    assert [b.text for b in ours] == [b.text for b in ref]


def _val_keys(mod, path, rank, world, workers, batch, limit, drop_last):
    class TE(mod.DefaultTaskEncoder):
        decoder = None

    wc = mod.WorkerConfig(rank=rank, world_size=world, num_workers=workers)
    ds = mod.get_val_dataset(
        path,
        split_part="train",
        worker_config=wc,
        batch_size=batch,
        batch_drop_last=drop_last,
        limit=limit,
        task_encoder=TE(),
    )
    loader = mod.get_loader(ds)
    return len(ds), len(loader), [list(b.__key__) for b in loader]


@pytest.mark.parametrize(
    "rank,world,workers,batch,limit,drop_last",
    [(0, 1, 4, 7, None, False), (1, 2, 2, 5, None, True), (2, 3, 0, 4, None, False), (0, 1, 3, 2, 5, False)],
)
def test_val_batches_per_worker_as_energon(root, rank, world, workers, batch, limit, drop_last):
    """With several workers or ranks, each worker batches its own slice and the batches come round robin:
    the same batches, in the same order, and the same len() as energon."""
    args = (root, rank, world, workers, batch, limit, drop_last)
    assert _val_keys(ea, *args) == _val_keys(energon, *args)
