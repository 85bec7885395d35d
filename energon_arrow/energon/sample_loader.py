"""energon's sample loader (WebdatasetSampleLoaderDataset) of one worker over one dataset, the first stage of its
training order (energon/train_order.py): each epoch shuffles the worker's sequences (k copies of each with
shuffle_over_epochs k; -1 draws them with replacement without end) and reads `parallel_shard_iters` of them at
once, picking the next one to read from with probability proportional to its length.

The sequences and draws are over energon's index space of a dataset, which keeps the samples the split.yaml excludes
one by one (`exclude: [<shard>/<key>]`); energon's sample loader reads an excluded sample like any other (its draw
and its place in the sequence are spent) and skips it, so the later stages never see it. `SampleLoader` does the
same with the dataset's `gaps` (SplitSource.excluded) and gives the kept samples as split rows.

Items are int64: dataset << ROW_BITS | row.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from energon_arrow.energon.torch_draws import BLOCK, Words, expected_gap, first_to_reach, picks
from energon_arrow.loader.split_rows import kept_rows

EMPTY = np.zeros(0, np.int64)
ROW_BITS = 40
ROW_MASK = (1 << ROW_BITS) - 1


class SampleLoader:
    """energon's sample loader of one worker over one dataset (`offsets`: its sequence boundaries). An iteration
    left right after its last row (a fractional repetition stops there) ends the epoch only when the next
    iteration begins, which then yields nothing, as energon's generator does.

    `gaps`: the dataset's excluded samples in energon's index space (the offsets' space); each block of positions
    read is cut down to its kept ones, as split rows, held in `kept` until asked for. An iteration left right after
    its last kept row (only excluded ones after it) also ends the epoch when the next one begins."""

    def __init__(
        self,
        owner: int,
        offsets: Sequence[int],
        over_epochs: int | None,
        parallel: int,
        seed: int,
        gaps: np.ndarray | None = None,
    ):
        self.tag = np.int64(owner << ROW_BITS)
        self.gaps = gaps if gaps is not None and len(gaps) else None
        self.kept, self.kept_at = EMPTY, 0  # kept rows of this epoch read ahead, the next one to give
        self.ended = False  # the positions of this epoch are all read (those in `kept` still to give)
        self.offsets = [int(o) for o in offsets]
        self.slices = len(offsets) - 1
        self.over, self.parallel = over_epochs, max(1, int(parallel))
        self.words = Words(seed)
        self.state = "fresh"  # "fresh" | "epoch" | "left" (after the last row, epoch end not processed yet)
        self.len_worker = self.offsets[-1] - self.offsets[0] if self.offsets else 0

    def has_samples(self) -> bool:
        return self.slices > 0

    def _start_epoch(self) -> None:
        n = self.slices
        self.P = 1 if self.over is None else self.parallel
        if self.over is None:
            order = list(range(n))
        elif self.over == -1:
            order = [self.words.below(n) for _ in range(self.P)]
        else:
            base = list(range(n)) * self.over
            order = [base[i] for i in self.words.permutation(len(base))]
        first = order[: self.P]
        self.pending = np.array(order[self.P :][::-1], np.int64)  # taken from the end
        self.npending = len(self.pending)
        self.cur = [self.offsets[s] for s in first] + [0] * (self.P - len(first))
        self.end = [self.offsets[s + 1] for s in first] + [0] * (self.P - len(first))
        self.probs = np.array([e - c for c, e in zip(self.cur, self.end)], np.float32)
        self.state = "epoch"

    def begin(self) -> bool:
        if self.slices < 1:
            return False
        if self.gaps is not None:
            if self.kept_at < len(self.kept):  # resuming the epoch
                return True
            if self.ended:  # its last kept row was given: this iteration ends the epoch
                self.ended = False
                return False
        if self.state == "left":
            self.state = "fresh"
            return False
        if self.state == "fresh":
            self._start_epoch()
        return True

    def snapshot(self) -> dict:
        snap = {
            "state": self.state,
            "ended": self.ended,
            "kept": self.kept[self.kept_at :].copy(),
            "words": self.words.snapshot(),
        }
        if self.state == "epoch":
            snap |= {
                "P": self.P,
                "pending": self.pending[: self.npending],  # never written: shared, not copied
                "cur": list(self.cur),
                "end": list(self.end),
                "probs": self.probs.copy(),
            }
        return snap

    def restore(self, snap: dict) -> None:
        self.state, self.ended = snap["state"], bool(snap["ended"])
        self.kept, self.kept_at = np.array(snap["kept"], np.int64), 0
        self.words.restore(snap["words"])
        if self.state == "epoch":
            self.P = int(snap["P"])
            self.pending = np.array(snap["pending"], np.int64)
            self.npending = len(self.pending)
            self.cur, self.end = [int(x) for x in snap["cur"]], [int(x) for x in snap["end"]]
            self.probs = np.array(snap["probs"], np.float32)

    def _refill(self, s: int) -> None:
        """Slot s ran out: the next pending sequence (or, drawing with replacement, a random one) takes it."""
        if self.npending or self.over == -1:
            if self.npending:
                self.npending -= 1
                nxt = int(self.pending[self.npending])
            else:
                nxt = self.words.below(self.slices)
            self.cur[s], self.end[s] = self.offsets[nxt], self.offsets[nxt + 1]
        else:
            self.cur[s] = self.end[s] = 0
        self.probs[s] = self.end[s] - self.cur[s]

    def read(self, n: int) -> np.ndarray:
        if self.gaps is None:
            return self._positions(n) | self.tag
        out, need = [], n
        while need > 0:
            if self.kept_at < len(self.kept):
                part = self.kept[self.kept_at : self.kept_at + need]
                self.kept_at += len(part)
                need -= len(part)
                out.append(part)
                continue
            if self.ended:  # the epoch's last kept row was given: this read ends it
                self.ended = False
                break
            m = max(need, BLOCK)
            positions = self._positions(m)
            self.ended = len(positions) < m
            self.kept, self.kept_at = kept_rows(self.gaps, positions) | self.tag, 0
        return np.concatenate(out) if out else EMPTY

    def _positions(self, n: int) -> np.ndarray:
        """Up to n positions of the epoch in energon's index space (fewer: the epoch ended)."""
        if self.state != "epoch":
            self.state = "fresh"
            return EMPTY
        out: list[np.ndarray] = []
        need = n
        while need > 0 and self.probs.any():
            if self.P == 1:  # no draws: the sequences one after the other
                k = min(need, self.end[0] - self.cur[0])
                out.append(np.arange(self.cur[0], self.cur[0] + k, dtype=np.int64))
                self.cur[0] += k
                need -= k
                if self.cur[0] == self.end[0]:
                    self._refill(0)
                continue
            left = [e - c for c, e in zip(self.cur, self.end)]
            m = min(need, BLOCK, 2 * expected_gap(left, self.probs) + 16)
            chosen = picks(self.words.peek(m), self.probs)
            at = first_to_reach(chosen, left)
            used = min(at + 1, m)
            chosen = chosen[:used]
            self.words.take(used)
            rows = np.empty(used, np.int64)
            for s in np.unique(chosen).tolist():
                hit = chosen == s
                c = int(np.count_nonzero(hit))
                rows[hit] = np.arange(self.cur[s], self.cur[s] + c)
                self.cur[s] += c
            out.append(rows)
            need -= used
            if at < m:
                self._refill(int(chosen[at]))
        if not self.probs.any():  # all rows given: a further read in this iteration ends the epoch
            self.state = "left" if need == 0 else "fresh"
        return np.concatenate(out) if out else EMPTY
