"""`PlanAhead`: a worker's own batches and their plans, each computed once for the dataset and its readers.

With energon's order each DataLoader worker reads the batches of one energon worker's stream of samples (its own
slices of the shards; energon/worker_slices.py). The window reader of a remote source plans its GETs over the
batches ahead of the ones being read; before this, it computed the rows of every worker's batches of a group
(global batch ids), so each worker computed the others' streams too, and asking a worker's stream for a group
ahead and then for the batch being read made the stream start again from its beginning (a `TrainStream` keeps
only the positions after the lowest one asked last). Here the dataset takes its batches in order (`take`) and the
readers ask for the plans of the batches ahead (`plans`, by position in the worker's sequence of batches): a plan
is computed once, in chunks, and kept until the dataset and every reader have passed it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import numpy as np

CHUNK = 16  # batches planned together (plan_many: one row lookup per source for all of them)

Plan = tuple[np.ndarray, np.ndarray]  # (source, row) of each sample of a batch


class PlanAhead:
    def __init__(self, ids: Iterator[int], plan_many: Callable[[list[int]], list[Plan]], total: int | None):
        """`ids`: this worker's batch ids in reading order (`total` of them, None: endless); `plan_many(ids)` the
        plans of several batches."""
        self._ids, self._plan_many, self.total = ids, plan_many, total
        self._base = 0  # position of the first id kept
        self._known: list[int] = []  # ids from position _base on
        self._ended = False
        self._plans: dict[int, Plan] = {}  # position -> plan, computed and not yet passed by every consumer
        self._taken = 0  # position of the dataset's next batch
        self._readers: dict[int, int] = {}  # reader -> the position it asks for next
        self._low = 0  # every plan before it is dropped

    def register(self) -> int:
        """A key for a reader that will ask for plans from position 0 on (kept for it until it asks)."""
        key = len(self._readers)
        self._readers[key] = 0
        return key

    def take(self) -> tuple[int, Plan] | None:
        """The dataset's next batch (id, plan), or None after the last."""
        p = self._taken
        self._fill(p + CHUNK)
        if p >= self._base + len(self._known):
            return None
        if p not in self._plans:
            self._compute(range(p, p + CHUNK))
        b, plan = self._known[p - self._base], self._plans[p]
        self._taken = p + 1
        self._drop()
        return b, plan

    def plans(self, reader: int, positions: range) -> list[Plan]:
        """The plans of the batches at `positions` for the `register`ed `reader` (which asks for each position
        once, in order); positions past the last batch are left out."""
        self._fill(positions.stop)
        end = min(positions.stop, self._base + len(self._known))
        positions = range(positions.start, max(positions.start, end))
        self._compute(positions)
        out = [self._plans[p] for p in positions]
        self._readers[reader] = positions.stop
        self._drop()
        return out

    def _fill(self, n: int) -> bool:
        """Pull ids until position n - 1 is known; False when the stream ends before it."""
        have = self._base + len(self._known)
        if have < n and not self._ended:
            more = list(itertools.islice(self._ids, n - have))
            self._known.extend(more)
            self._ended = len(more) < n - have
        return self._base + len(self._known) >= n

    def _compute(self, positions: range) -> None:
        end = min(positions.stop, self._base + len(self._known))
        missing = [p for p in range(positions.start, end) if p not in self._plans]
        if missing:
            got = self._plan_many([self._known[p - self._base] for p in missing])
            self._plans.update(zip(missing, got))

    def _drop(self) -> None:
        """Forget the plans and ids every consumer has passed."""
        low = min([self._taken, *self._readers.values()])
        for p in range(self._low, low):
            self._plans.pop(p, None)
        self._low = max(self._low, low)
        if low - self._base > 1024:
            del self._known[: low - self._base]
            self._base = low
