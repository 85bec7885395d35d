"""Packing, grouping, unbatched and generator hooks in energon's per-worker order (energon/worker_regroup.py), as
energon runs them inside each worker: every worker packs and batches its own stream, the loader takes the workers'
outputs in turn, a generator's outputs see the batch they go to, and states resume inside each worker's buffers
(energon's tests/test_dataset.py::test_packing and ::test_current_batch_index_generator;
tests/conformance/test_worker_regroup_energon.py compares with energon itself)."""

from __future__ import annotations

import random

import numpy as np
import pytest

import energon_arrow as ea
from energon_arrow.energon.worker_slices import WorkerSchedule
from energon_arrow.loader.errors import LoaderError
from tests.energon.test_packing import take

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


@ea.edataclass
class Numbered(ea.Sample):
    batch_index: int
    sample_index: int
    rand: int


@ea.edataclass
class Pack(ea.Sample):
    keys: list


class Raw(ea.DefaultTaskEncoder):
    decoder = None  # the synthetic shards' images are not real JPEGs


class TwiceTE(ea.DefaultTaskEncoder):
    """Two outputs per sample, each recording the indices the hooks saw and a seeded random number."""

    decoder = None

    @ea.stateless(restore_seeds=True)
    def encode_sample(self, sample):
        for _ in range(2):
            yield Numbered.derive_from(
                sample,
                batch_index=self.current_batch_index,
                sample_index=self.current_sample_index,
                rand=random.randint(0, 10**6),
            )


class PackTE(ea.DefaultTaskEncoder):
    """Packs each window of 6 samples into packs of 1, 2 and 3 samples."""

    decoder = None

    def select_samples_to_pack(self, samples):
        assert len(samples) == 6  # endless streams: each worker's windows are full
        return [samples[:1], samples[1:3], samples[3:]]

    @ea.stateless
    def pack_selected_samples(self, samples):
        return Pack(__key__=",".join(s.__key__ for s in samples), __restore_key__=(), keys=samples)

    @ea.stateless
    def batch(self, samples):
        return Pack(
            __key__=[p.__key__ for p in samples], __restore_key__=(), keys=[len(p.keys) for p in samples]
        )


def loader(root, te, workers=0, rank=0, world=1, **kw):
    wc = ea.WorkerConfig(rank=rank, world_size=world, num_workers=workers)
    kw = dict(batch_size=3, shuffle_buffer_size=None, max_samples_per_sequence=None) | kw
    return ea.get_savable_loader(ea.get_train_dataset(root, worker_config=wc, task_encoder=te, **kw))


def packing(root, workers=0, **kw):
    return loader(root, PackTE(), workers, batch_size=2, packing_buffer_size=6, **kw)


@pytest.mark.parametrize("workers", [0, 2])
def test_generator_outputs_see_the_batch_they_go_to(prepared_root, workers):
    batches = take(loader(prepared_root, TwiceTE(), workers), 12)
    assert [b.batch_index for b in batches] == [[i] * 3 for i in range(12)]
    n = max(workers, 1)
    for i, b in enumerate(batches):
        w, k = i % n, i // n  # the loader takes one batch from each worker in turn
        # the worker's k-th batch holds its outputs 3k..3k+2: two per sample, numbered k * n + w
        assert b.sample_index == [(3 * k + j) // 2 * n + w for j in range(3)]
    ld = loader(prepared_root, TwiceTE(), workers)
    for b in batches[:4]:
        again = ld.restore_sample(b.__restore_key__)
        for field in ("__key__", "batch_index", "sample_index", "rand"):
            assert getattr(again, field) == getattr(b, field)


@pytest.mark.parametrize("cut", [3, 6])
def test_generator_numbering_resumes(prepared_root, cut):
    ref = take(loader(prepared_root, TwiceTE(), 2), 12)
    first = loader(prepared_root, TwiceTE(), 2)
    take(first, cut)
    second = loader(prepared_root, TwiceTE(), 2)
    second.restore_state_rank(first.save_state_rank())
    rest = take(second, 12 - cut)
    assert [(b.__key__, b.batch_index, b.sample_index, b.rand) for b in rest] == [
        (b.__key__, b.batch_index, b.sample_index, b.rand) for b in ref[cut:]
    ]


def test_unbatched_outputs_are_numbered_per_worker(prepared_root):
    items = take(loader(prepared_root, TwiceTE(), 2, batch_size=None), 10)
    assert [s.batch_index for s in items] == list(range(10))  # worker i % 2's (i // 2)-th item
    assert [s.sample_index for s in items] == [0, 1, 0, 1, 2, 3, 2, 3, 4, 5]


def test_each_worker_packs_its_own_stream(prepared_root):
    sizes = [b.keys for b in take(packing(prepared_root), 6)]
    assert sizes == [[1, 2], [3, 1], [2, 3]] * 2
    batches = take(packing(prepared_root, 2, rank=1, world=2), 8)
    assert [b.keys for b in batches] == [[1, 2], [1, 2], [3, 1], [3, 1], [2, 3], [2, 3], [1, 2], [1, 2]]
    unpacked = take(loader(prepared_root, Raw(), 2, rank=1, world=2, batch_size=None), 36)
    by_worker = [[s.__key__ for s in unpacked[w::2]] for w in range(2)]
    for w in range(2):  # worker w's packs are its own samples, in its order
        packed = [k for b in batches[w::2] for p in b.__key__ for k in p.split(",")]
        assert packed == by_worker[w][: len(packed)]


@pytest.mark.parametrize("cut", [1, 3, 4])
def test_state_resumes_inside_each_workers_buffers(prepared_root, cut):
    ref = take(packing(prepared_root, 2), 10)
    first = packing(prepared_root, 2)
    take(first, cut)
    state = first.save_state_rank()
    assert len(state["regroup"]["workers"]) == 2
    second = packing(prepared_root)
    with pytest.raises(LoaderError, match="same workers"):
        second.restore_state_rank(state)  # the buffers are per worker: the same workers are needed
    second = packing(prepared_root, 2)
    second.restore_state_rank(state)
    assert [b.__key__ for b in take(second, 10 - cut)] == [b.__key__ for b in ref[cut:]]
    again = second.restore_sample(ref[cut].__restore_key__)
    assert again.__key__ == ref[cut].__key__


def test_val_limit_is_shared_by_the_workers(prepared_root):
    class Grouped(ea.DefaultTaskEncoder):
        decoder = None

        def batch_group_criterion(self, sample):
            return int(sample.__key__[-1]) % 2, 2

    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=2)
    val = ea.get_val_dataset(
        prepared_root, worker_config=wc, batch_size=None, task_encoder=Grouped(), limit=5
    )
    batches = [[int(k[-6:]) for k in b.__key__] for b in ea.get_loader(val)]
    # 3 batches of worker 0 (samples 0-19), 2 of worker 1 (20-39), in turn; each groups by the key's parity
    assert batches == [[0, 2], [20, 22], [1, 3], [21, 23], [4, 6]]


@pytest.mark.parametrize("start", [0, 1, 4, 7, 9])
def test_each_reader_takes_one_workers_batches_in_batch_order(start):
    schedule = WorkerSchedule([None] * 3, [2, 4, 1], batch_size=1)  # uneven: workers drop out of the turn
    readers = [list(schedule.reader_chunks(start, k, 3)) for k in range(3)]
    for chunks in readers:
        assert len({schedule.worker_of(b) for b in chunks}) <= 1
    delivered, queues = [], [list(r) for r in readers]
    while any(queues):  # torch's round robin over the readers, skipping finished ones
        for q in queues:
            if q:
                delivered.append(q.pop(0))
    assert delivered == list(range(start, schedule.rank_batches))
    assert np.array_equal(schedule.worker[: schedule.rank_batches], [0, 1, 2, 0, 1, 1, 1])
