"""PlanAhead: a worker's batches and plans computed once for the dataset and its readers planning ahead."""

import itertools

import numpy as np

from energon_arrow.loader.plan_ahead import CHUNK, PlanAhead


def _planner(ids, total=None):
    asked = []

    def plan_many(chunk):
        asked.extend(chunk)
        return [(np.zeros(2, np.int64), np.array([b, b + 1000], np.int64)) for b in chunk]

    return PlanAhead(iter(ids), plan_many, total), asked


def test_dataset_and_readers_get_the_same_plans_each_computed_once():
    ids = list(range(3, 300, 2))  # a worker's batch ids
    ahead, asked = _planner(ids, len(ids))
    r1, r2 = ahead.register(), ahead.register()
    taken, seen1, seen2 = [], [], []
    pos = 0
    while (item := ahead.take()) is not None:
        taken.append(item)
        if len(taken) % 7 == 1 and pos < len(ids):  # the readers plan a group ahead of the batch taken
            group = range(pos, min(pos + 25, len(ids) + 3))  # the last group asks past the end
            seen1 += ahead.plans(r1, group)
            seen2 += ahead.plans(r2, group)
            pos = group.stop
    assert [b for b, _ in taken] == ids
    assert [int(p[1][0]) for _, p in taken] == ids
    assert [int(p[1][0]) for p in seen1] == ids and [int(p[1][0]) for p in seen2] == ids
    assert sorted(asked) == ids  # every batch planned once
    assert not ahead._plans  # nothing kept once every consumer passed


def test_an_endless_stream_keeps_only_what_is_ahead():
    ahead, asked = _planner(itertools.count(0, 3))
    reader = ahead.register()
    for g in range(200):
        got = ahead.plans(reader, range(g * 50, g * 50 + 50))
        assert [int(p[1][0]) for p in got] == list(range(g * 150, g * 150 + 150, 3))
        for _ in range(50):
            b, _plan = ahead.take()
    assert b == 3 * (200 * 50 - 1)
    assert len(ahead._plans) <= CHUNK and len(ahead._known) <= 1024 + 2 * CHUNK + 50
    assert len(asked) <= 200 * 50 + CHUNK


def test_take_alone_plans_in_chunks():
    ahead, asked = _planner(range(40), 40)
    first = ahead.take()
    assert first[0] == 0 and asked == list(range(CHUNK))
    rest = [ahead.take() for _ in range(39)]
    assert [b for b, _ in rest] == list(range(1, 40)) and ahead.take() is None
