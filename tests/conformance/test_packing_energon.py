"""The same packing task encoder (preencode_sample, select_samples_to_pack, postencode_sample,
pack_selected_samples, batch) run on energon 7.4.1 and on energon-arrow, only the import switched.

Packs depend on which samples share a packing buffer, and a buffer holds consecutive samples of a worker's
stream: here one worker, validation (the same packs in the same order) and training epochs (the same packs; with
several workers, tests/conformance/test_worker_regroup_energon.py compares the batches themselves). Also the same
selection / postencode calls and the same skip-and-flush behaviour at the end of a finite pass."""

from __future__ import annotations

from collections import Counter

import pytest

import energon_arrow as ea
from energon_arrow.testing.synthetic import write_webdataset
from tests.reference import energon_prepare

pytestmark = pytest.mark.conformance
energon = pytest.importorskip("megatron.energon")

SHARDS, PER_SHARD = 3, 20  # split 3,1,0 by samples: 45 train, 15 val


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("pack-conf") / "ds")
    write_webdataset(path, shards=SHARDS, samples_per_shard=PER_SHARD, image_bytes=50)
    energon_prepare(path)
    return path


def make_task_encoder(mod, capacity: int = 82):
    """The user's packing task encoder, written against `mod` (megatron.energon or energon_arrow)."""

    @mod.edataclass
    class Text(mod.Sample):
        text: str
        posted: bool = False

    @mod.edataclass
    class Pack(mod.Sample):
        texts: list

    class PackingTE(mod.DefaultTaskEncoder):
        decoder = None

        def preencode_sample(self, sample):
            return Text.derive_from(sample, text=bytes(sample.caption).decode())

        def postencode_sample(self, sample):
            return Text.derive_from(sample, text=sample.text.upper(), posted=True)

        def select_samples_to_pack(self, samples):
            # order-insensitive first fit by text length; samples longer than the capacity are dropped
            packs, current, size = [], [], 0
            for s in sorted(samples, key=lambda s: (len(s.text), s.__key__)):
                if len(s.text) > capacity // 2:
                    continue
                if size + len(s.text) > capacity:
                    packs.append(current)
                    current, size = [], 0
                current.append(s)
                size += len(s.text)
            return packs + [current]

        @mod.stateless
        def pack_selected_samples(self, samples):
            assert all(s.posted for s in samples)
            return Pack.derive_from(samples[0], texts=[(s.__key__, s.text) for s in samples])

        def batch(self, samples):
            return [tuple(p.texts) for p in samples]

    return PackingTE()


def _tuples(x):
    """energon's loader hands tuples back as lists (torch's pin-memory pass): compare as nested tuples."""
    return tuple(_tuples(v) for v in x) if isinstance(x, (list, tuple)) else x


def train_packs(mod, root, buffer, batch_size=2):
    wc = mod.WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = mod.get_train_dataset(
        root,
        worker_config=wc,
        batch_size=batch_size,
        packing_buffer_size=buffer,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        task_encoder=make_task_encoder(mod),
        repeat=False,
    )
    return [_tuples(batch) for batch in mod.get_loader(ds)]


def val_packs(mod, root, buffer, batch_size=2):
    wc = mod.WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = mod.get_val_dataset(
        root,
        worker_config=wc,
        batch_size=batch_size,
        packing_buffer_size=buffer,
        task_encoder=make_task_encoder(mod),
    )
    return [_tuples(batch) for batch in mod.get_loader(ds)]


@pytest.mark.parametrize("buffer", [4, 7])
def test_val_same_packs_same_order(root, buffer):
    ours, ref = val_packs(ea, root, buffer), val_packs(energon, root, buffer)
    assert ours == ref and ours


def test_train_epoch_in_one_buffer_same_packs(root):
    ours, ref = train_packs(ea, root, buffer=64), train_packs(energon, root, buffer=64)
    assert Counter(p for b in ours for p in b) == Counter(p for b in ref for p in b)
    assert sorted(len(b) for b in ours) == sorted(len(b) for b in ref)


def test_train_epoch_packs_every_selected_sample_once(root):
    ours, ref = train_packs(ea, root, buffer=6), train_packs(energon, root, buffer=6)

    def packed(batches):
        return Counter(text for b in batches for p in b for text in p)

    # the buffers differ with the order, the selection rule does not: the same samples are packed, once each
    assert packed(ours) == packed(ref)
    assert set(packed(ours).values()) == {1}


def test_len_same(root):
    def lengths(mod):
        wc = mod.WorkerConfig(rank=0, world_size=1, num_workers=2)
        kw = dict(worker_config=wc, batch_size=2, packing_buffer_size=6)
        train = mod.get_train_dataset(
            root,
            task_encoder=make_task_encoder(mod),
            shuffle_buffer_size=None,
            max_samples_per_sequence=None,
            **kw,
        )
        val = mod.get_val_dataset(root, task_encoder=make_task_encoder(mod), **kw)
        return len(train), len(val)

    assert lengths(ea) == lengths(energon)
