"""energon/train_stream.py: training streams resume from snapshots of their stages, exactly, instead of being
computed again from their start; the snapshots travel from the workers into the loader's state."""

from __future__ import annotations

import json

import numpy as np
import pytest

import energon_arrow as ea
from energon_arrow.energon import train_stream
from energon_arrow.energon.train_stream import TrainStream, from_json, to_json
from energon_arrow.energon.worker_slices import train_pipeline

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


def _pipeline(**kw):
    """Worker 0's stages over two datasets of 1,000 and 500 samples, slices of 100 and 50."""
    args = dict(
        offsets=[[list(range(0, 1001, 100))], [list(range(0, 501, 50))]],
        sizes=[1000, 500],
        seed=3,
        over_epochs=[1, 1],
        parallel=4,
        weights=None,
        repetitions=None,
        repeat=True,
        shuffle_buffer=None,
    )
    args.update(kw)
    return lambda: train_pipeline(0, **args)


PIPELINES = {
    "repeated": _pipeline(),
    "weighted blend, shuffle buffer": _pipeline(weights=[1.0, 2.0], shuffle_buffer=50),
    "blend_epochized, repeated": _pipeline(repetitions=[1.5, 2], shuffle_buffer=20),
    "drawn with replacement": _pipeline(over_epochs=[-1, 2], weights=[1, 1]),
    "excluded samples": _pipeline(gaps=[np.array([3, 7, 250, 251, 999]), None]),
    "blend_epochized, one pass": _pipeline(repetitions=[1.5, 2], repeat=False),
    "one pass, shuffle buffer": _pipeline(repeat=False, shuffle_buffer=10),
}


def _read(stage, n: int, step: int) -> list[np.ndarray]:
    out, got = [], 0
    while got < n:
        part = stage.read(min(step, n - got))
        if not len(part):
            break
        out.append(part)
        got += len(part)
    return out


@pytest.mark.parametrize("name", list(PIPELINES))
@pytest.mark.parametrize("cut", [0, 1, 37, 999, 1500, 2400, 4100])
def test_every_stage_resumes_exactly_from_its_snapshot(name, cut):
    build = PIPELINES[name]
    stage = build()
    stage.begin()
    _read(stage, cut, 333)
    snap = from_json(json.loads(json.dumps(to_json(stage.snapshot()))))  # through a JSON state
    rest = np.concatenate(_read(stage, 5000, 257) or [np.zeros(0, np.int64)])
    again = build()
    again.restore(snap)
    assert np.array_equal(np.concatenate(_read(again, 5000, 411) or [np.zeros(0, np.int64)]), rest)


def test_a_stream_starts_from_the_latest_snapshot_at_or_before_the_position(monkeypatch):
    monkeypatch.setattr(train_stream, "SNAPSHOT_EVERY", 5000)
    build = PIPELINES["weighted blend, shuffle buffer"]
    first = TrainStream(build)
    for lo in range(0, 60000, 700):  # asked in pieces, as a worker's plans ask
        first.items(lo, lo + 700)
    # at multiples of SNAPSHOT_EVERY (the stream reads a block ahead, past 60,000), the latest 4 kept
    assert [p for p, _ in first.snapshots] == [45000, 50000, 55000, 60000]
    assert [p for p, _ in first.outbox][:2] == [5000, 10000]  # every one taken is sent

    computed = []

    def counted():
        stage = build()
        read = stage.read
        stage.read = lambda n: computed.append(len(out := read(n))) or out
        return stage

    second = TrainStream(counted)
    for pos, snap in first.snapshots:
        second.adopt(pos, snap)
    assert np.array_equal(second.items(52000, 52100), TrainStream(build).items(52000, 52100))
    assert sum(computed) < 5000  # from the snapshot at 50,000, not from 0
    computed.clear()
    second.items(3000, 3010)  # before every snapshot: from the start
    assert sum(computed) >= 3010


RAW = type("RawTE", (ea.DefaultTaskEncoder,), {"decoder": None})


def _loader(root, workers: int):
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=workers, seed_offset=3)
    ds = ea.get_train_dataset(
        root,
        worker_config=wc,
        batch_size=4,
        shuffle_buffer_size=8,
        max_samples_per_sequence=5,
        task_encoder=RAW(),
    )
    return ea.get_savable_loader(ds)


def _keys(loader, n: int) -> list:
    it = iter(loader)
    out = [next(it).__key__ for _ in range(n)]
    it.close()
    return out


@pytest.mark.parametrize("workers", [0, 2])
def test_a_restored_loader_resumes_from_the_workers_snapshots(prepared_root, monkeypatch, workers):
    monkeypatch.setattr(train_stream, "SNAPSHOT_EVERY", 64)
    ref = _keys(_loader(prepared_root, workers), 90)
    first = _loader(prepared_root, workers)
    head = _keys(first, 70)  # 280 samples: 140 per worker with 2 workers
    state = json.loads(json.dumps(first.save_state_rank()))
    reached = [140, 140] if workers else [280]
    assert [s["at"] for s in state["worker_streams"]] == [p // 64 * 64 for p in reached]

    origins = []  # where each stream computed in this process started from
    start = TrainStream._start
    monkeypatch.setattr(
        TrainStream, "_start", lambda self, lo: origins.append(self.snapshot_at(lo)) or start(self, lo)
    )
    second = _loader(prepared_root, workers)
    second.restore_state_rank(state)
    assert head + _keys(second, 20) == ref
    if not workers:  # the stream is computed in this process: from the saved snapshot, not from its start
        assert [o[0] for o in origins if o is not None] == [256]

    # a snapshot of another stream is not taken: that stream is computed from its start, still exactly (each
    # entry also claims an earlier position, so adopting it anyway would give other batches)
    foreign = json.loads(json.dumps(state))
    for entry in foreign["worker_streams"]:
        entry["stream"], entry["at"] = "another", entry["at"] - 64
    third = _loader(prepared_root, workers)
    third.restore_state_rank(foreign)
    assert head + _keys(third, 20) == ref
