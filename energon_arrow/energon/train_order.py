"""energon 7.4's training order for one worker, reproduced exactly and without reading any data.

energon gives every worker of every rank a fixed slice of each training dataset (energon_len.worker_ranges, cut
into sequences at shard boundaries and every `max_samples_per_sequence` samples) and reads it through a chain of
stages, each with its own random generator seeded with the worker's seed (energon's `WorkerRng`):
- the sample loader (energon's WebdatasetSampleLoaderDataset, energon/sample_loader.py);
- RepeatDataset (endless, or `repetitions` times with a fractional last pass), BlendDataset (weighted picks; a
  finite blend stops drawing from a dataset once it is exhausted), ShuffleBufferDataset (a random pop from a
  buffer of `shuffle_buffer_size`): the stages here.

energon's generator is a torch CPU Generator; its draws are made in bulk (energon/torch_draws.py) and each stage
turns a block of them into a block of (dataset, row) pairs with numpy; the per-sample Python loop energon runs is
only kept for the shuffle buffer (a list pop per sample). The whole order is checked against energon itself in
tests/conformance/test_energon_train_order.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from energon_arrow.energon.sample_loader import EMPTY
from energon_arrow.energon.torch_draws import BLOCK, Words, expected_gap, first_to_reach, picks
from energon_arrow.loader.errors import LoaderError

# Every stage is iterated as energon's `for sample in dataset`: `begin()` starts an iteration (False: it yields
# nothing), `read(n)` gives up to n items (dataset << ROW_BITS | row, sample_loader.py) and an empty array once the
# iteration ended. `snapshot()` is where a stage stands (numbers and numpy arrays, energon/train_stream.py) and
# `restore(snap)` puts a freshly built stage of the same pipeline there, so a stream resumes from a snapshot
# instead of being computed again from its start.


class Repeat:
    """energon's RepeatDataset: `repeats` None iterates the inner stage forever; a float r iterates it floor(r)
    times, then stops the last iteration after floor(len_worker * frac(r)) items; iterated anew, it starts again
    at repetition 0 (the inner stage may then resume where the fractional iteration left it)."""

    def __init__(self, inner, repeats: float | None):
        self.inner, self.repeats = inner, repeats
        self.len_worker = inner.len_worker if repeats is None else int(inner.len_worker * repeats)
        self.rep = self.index = 0
        self.active = False  # inside an iteration of the inner stage
        self.idle = 0  # iterations in a row that yielded nothing (all of a worker's samples excluded)

    def has_samples(self) -> bool:
        return self.inner.has_samples()

    def begin(self) -> bool:
        if self.repeats is None and not self.inner.has_samples():
            raise LoaderError("Cannot repeat empty dataset indefinitely (a worker has no samples)")
        self.rep, self.index, self.active = 0, 0, False
        return True

    def read(self, n: int) -> np.ndarray:
        out: list[np.ndarray] = []
        need = n
        while need > 0 and (self.repeats is None or self.rep < self.repeats):
            stop = None
            if self.repeats is not None and self.rep == math.floor(self.repeats):
                stop = math.floor(self.inner.len_worker * (self.repeats - math.floor(self.repeats)))
                if self.index >= stop:
                    break
            if not self.active and not self.inner.begin():
                self._next()
                continue
            self.active = True
            items = self.inner.read(need if stop is None else min(need, stop - self.index))
            self.idle = 0 if len(items) else self.idle + (self.index == 0)
            if self.repeats is None and self.idle > 2:  # energon would loop forever here, yielding nothing
                raise LoaderError(
                    "Cannot repeat empty dataset indefinitely (a worker's samples are all excluded by split.yaml)"
                )
            out.append(items)
            need -= len(items)
            self.index += len(items)
            if not len(items) or (stop is not None and self.index >= stop):
                self._next()
        return np.concatenate(out) if out else EMPTY

    def _next(self) -> None:
        self.rep, self.index, self.active = self.rep + 1, 0, False

    def snapshot(self) -> dict:
        return {
            "rep": self.rep,
            "index": self.index,
            "active": self.active,
            "idle": self.idle,
            "inner": self.inner.snapshot(),
        }

    def restore(self, snap: dict) -> None:
        self.rep, self.index, self.idle = int(snap["rep"]), int(snap["index"]), int(snap["idle"])
        self.active = bool(snap["active"])
        self.inner.restore(snap["inner"])


class Blend:
    """energon's BlendDataset: each item from the inner stage picked with probability proportional to its
    weight (zero for a stage with no samples on this worker). Inner stages that end (a finite blend) are read
    whole when the iteration begins; a pick of an ended stage yields nothing and drops its weight to zero."""

    def __init__(self, inners: list, weights: Sequence[float], seed: int):
        self.inners = inners
        self.weights = np.asarray(weights, np.float32)
        self.words = Words(seed)
        self.endless = all(isinstance(i, Repeat) and i.repeats is None for i in inners)
        self.len_worker = sum(i.len_worker for i in inners)

    def has_samples(self) -> bool:
        return any(i.has_samples() for i in self.inners)

    def begin(self) -> bool:
        if not self.has_samples():
            raise LoaderError("Cannot blend all empty datasets (a worker has no samples in any of them)")
        self.live = self._initial_live()
        if self.endless:
            for i, w in zip(self.inners, self.live):
                if w:
                    i.begin()
            return True
        self.begun = [i.snapshot() for i in self.inners]  # what restore() reads the items ahead from again
        self._read_ahead(self.live)
        self.at = [0] * len(self.inners)
        return True

    def _initial_live(self) -> np.ndarray:
        return np.array([w if i.has_samples() else 0 for i, w in zip(self.inners, self.weights)], np.float32)

    def _read_ahead(self, live: np.ndarray) -> None:
        """A finite blend: this iteration's items of each inner stage, read whole."""
        self.items = []
        for i, w in zip(self.inners, live):
            parts = []
            if w and i.begin():
                while len(part := i.read(BLOCK)):
                    parts.append(part)
            self.items.append(np.concatenate(parts) if parts else EMPTY)

    def snapshot(self) -> dict:
        """A finite blend's inner stages as they were when its iteration began (the items it read ahead are read
        again from there: a snapshot of the items themselves would hold a whole epoch)."""
        snap: dict = {"words": self.words.snapshot()}
        if hasattr(self, "live"):
            snap["live"] = self.live.copy()
        if self.endless or not hasattr(self, "begun"):
            snap["inners"] = [i.snapshot() for i in self.inners]
        else:
            snap |= {"begun": self.begun, "at": list(self.at)}
        return snap

    def restore(self, snap: dict) -> None:
        self.words.restore(snap["words"])
        for inner, sub in zip(self.inners, snap["inners"] if "inners" in snap else snap["begun"]):
            inner.restore(sub)
        if "begun" in snap:
            self.begun = snap["begun"]
            self._read_ahead(self._initial_live())
            self.at = [int(a) for a in snap["at"]]
        if "live" in snap:
            self.live = np.array(snap["live"], np.float32)

    def _chosen(self, n: int, probs: np.ndarray) -> np.ndarray:
        if len(probs) == 1:
            return np.zeros(n, np.int64)
        return picks(self.words.peek(n), probs)

    def read(self, n: int) -> np.ndarray:
        if self.endless:
            chosen = self._chosen(n, self.live)
            if len(self.live) > 1:
                self.words.take(n)
            out = np.empty(n, np.int64)
            for d in np.unique(chosen).tolist():
                hit = chosen == d
                out[hit] = self.inners[d].read(int(np.count_nonzero(hit)))
            return out
        out, need = [], n
        while need > 0 and self.live.any():
            left = [len(it) - a + 1 if w else 0 for it, a, w in zip(self.items, self.at, self.live)]
            m = min(need, BLOCK, 2 * expected_gap(left, self.live) + 16)
            chosen = self._chosen(m, self.live)
            at = first_to_reach(chosen, left)
            used = min(at + 1, m)
            if len(self.live) > 1:
                self.words.take(used)
            got = chosen[: min(at, m)]
            rows = np.empty(len(got), np.int64)
            for d in np.unique(got).tolist():
                hit = got == d
                c = int(np.count_nonzero(hit))
                rows[hit] = self.items[d][self.at[d] : self.at[d] + c]
                self.at[d] += c
            out.append(rows)
            need -= len(rows)
            if at < m:
                self.live[int(chosen[at])] = 0
        return np.concatenate(out) if out else EMPTY


class ShuffleBuffer:
    """energon's ShuffleBufferDataset: items enter a buffer; once it holds `size`, each output is a random pop
    (and when the inner stage ends, the buffer is drained the same way)."""

    def __init__(self, inner, size: int, seed: int):
        self.inner, self.size = inner, size
        self.words = Words(seed)
        self.len_worker = inner.len_worker

    def has_samples(self) -> bool:
        return self.inner.has_samples()

    def begin(self) -> bool:
        self.buf: list[int] = []
        self.incoming: list[int] = []
        self.pos = 0
        self.ended = not self.inner.begin()
        self.before: dict | None = None  # the inner stage's snapshot before `incoming` was read from it
        return True

    def snapshot(self) -> dict:
        """Once items came in: the inner stage as it was before its last block of items was read (restore reads it
        again; a snapshot of the items would be a block long)."""
        snap: dict = {"words": self.words.snapshot()}
        if hasattr(self, "buf"):
            snap |= {"buf": np.array(self.buf, np.int64), "pos": self.pos, "ended": self.ended}
        if getattr(self, "before", None) is None:
            return snap | {"inner": self.inner.snapshot()}
        return snap | {"before": self.before}

    def restore(self, snap: dict) -> None:
        self.words.restore(snap["words"])
        if "buf" in snap:
            self.buf = np.asarray(snap["buf"], np.int64).tolist()
            self.pos, self.ended = int(snap["pos"]), bool(snap["ended"])
            self.before, self.incoming = snap.get("before"), []
        if "before" in snap:
            self.inner.restore(self.before)
            self.incoming = self.inner.read(BLOCK).tolist()
        else:
            self.inner.restore(snap["inner"])

    def read(self, n: int) -> np.ndarray:
        words = self.words.peek(n).tolist()
        buf, size, out = self.buf, self.size, []
        while len(out) < n:
            if len(buf) >= size and self.pos < len(self.incoming):
                # steady state: each output pops a random item and the next incoming item takes its place (energon
                # pushes the last of these at its next output: the same sequence)
                k = min(n - len(out), len(self.incoming) - self.pos)
                incoming, pos, done = self.incoming, self.pos, len(out)
                pop, push, emit = buf.pop, buf.append, out.append
                for j in range(k):
                    emit(pop(words[done + j] % size))
                    push(incoming[pos + j])
                self.pos += k
            elif len(buf) >= size or (self.ended and buf):
                out.append(buf.pop(words[len(out)] % len(buf)))
            elif self.ended:
                break
            elif self.pos < len(self.incoming):
                k = min(size - len(buf), len(self.incoming) - self.pos)
                buf.extend(self.incoming[self.pos : self.pos + k])
                self.pos += k
            else:
                self.before = self.inner.snapshot()  # where `incoming` is read again from on restore
                self.incoming, self.pos = self.inner.read(BLOCK).tolist(), 0
                self.ended = not self.incoming
        self.words.take(len(out))
        return np.array(out, np.int64)
