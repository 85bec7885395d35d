"""torch's CPU generator, drawn in bulk: energon's `WorkerRng` draws from a torch CPU Generator (MT19937) one call
at a time; numpy's MT19937 with legacy seeding yields the same 32-bit words, and torch derives its draws from them
with fixed formulas (a float is the word's low 24 bits over 2^24, randint(n) is word % n, randperm is Fisher-Yates
with word % (n - i)). `Words` hands out those words in order, drawn ahead in blocks, and its state (the generator's
and the words drawn ahead) can be saved and restored exactly; the functions turn blocks of words into energon's
draws with numpy. The words are checked against torch's in tests/energon/test_train_order.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

BLOCK = 4096  # draws made at once when nothing forces fewer


class Words:
    """The 32-bit words of a torch CPU Generator seeded with `seed`, drawn ahead and consumed in order.

    Its snapshot is the generator's state before the first word drawn ahead and not consumed yet, with how many
    words were drawn and consumed from there (`restore` draws them again): a few KB, not the words themselves."""

    def __init__(self, seed: int):
        state = np.random.RandomState(int(seed) & 0xFFFFFFFF).get_state(legacy=False)
        self._bits = np.random.MT19937()
        self._bits.state = {"bit_generator": "MT19937", "state": state["state"]}
        self._buf = np.zeros(0, np.uint64)
        self._at = 0
        self._first = self._bits.state["state"]  # the generator's state before _buf[0]

    def peek(self, n: int) -> np.ndarray:
        """The next `n` words, not consumed."""
        have = len(self._buf) - self._at
        if have < n:
            if not have:
                self._first = self._bits.state["state"]
            elif self._at:  # the words kept start _at words after _buf[0]
                skip = np.random.MT19937()
                skip.state = {"bit_generator": "MT19937", "state": self._first}
                skip.random_raw(self._at)
                self._first = skip.state["state"]
            more = self._bits.random_raw(max(n - have, BLOCK))
            self._buf = np.concatenate([self._buf[self._at :], more])
            self._at = 0
        return self._buf[self._at : self._at + n]

    def take(self, n: int) -> np.ndarray:
        out = self.peek(n)
        self._at += n
        return out

    def snapshot(self) -> dict:
        """JSON-able; `restore` puts a Words of the same seed exactly here."""
        return {
            "key": self._first["key"],  # never written: shared, not copied
            "pos": int(self._first["pos"]),
            "drawn": len(self._buf),
            "at": self._at,
        }

    def restore(self, snap: dict) -> None:
        first = {"key": np.array(snap["key"], np.uint32), "pos": int(snap["pos"])}
        self._bits.state = {"bit_generator": "MT19937", "state": first}
        self._first = self._bits.state["state"]
        self._buf, self._at = self._bits.random_raw(int(snap["drawn"])), int(snap["at"])

    def below(self, n: int) -> int:
        """torch.randint(0, n, ()) of the generator."""
        return int(self.take(1)[0] % np.uint64(n))

    def permutation(self, n: int) -> list[int]:
        """torch.randperm(n) of the generator."""
        if n < 2:
            return list(range(n))
        words = self.take(n - 1).tolist()
        out = list(range(n))
        for i, w in enumerate(words):
            j = i + w % (n - i)
            out[i], out[j] = out[j], out[i]
        return out


def as_floats(words: np.ndarray) -> np.ndarray:
    """torch.rand(n) of the generator that produced `words`."""
    return (words & np.uint64(0xFFFFFF)).astype(np.float32) * np.float32(2.0**-24)


def picks(words: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """energon's WorkerRng.choice_idx for each word: the float times the float32 cumulative sum's total, located
    in that cumulative sum (upper bound, so zero-probability entries are never picked)."""
    cdf = torch.cumsum(torch.from_numpy(probs.astype(np.float32)), 0).numpy()
    return np.searchsorted(cdf, as_floats(words) * cdf[-1], side="right")


def first_to_reach(chosen: np.ndarray, limits: Sequence[int]) -> int:
    """The index in `chosen` at which some slot s is chosen for the limits[s]-th time (len(chosen) if none;
    limits of 0 never reach)."""
    limits = np.asarray(limits, np.int64)
    counts = np.bincount(chosen, minlength=len(limits))
    reached = np.flatnonzero((limits > 0) & (counts >= limits))
    if not len(reached):
        return len(chosen)
    by_slot = np.argsort(chosen, kind="stable")  # the positions of each slot's picks, in order
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    return int(by_slot[starts[reached] + limits[reached] - 1].min())


def expected_gap(left: Sequence[int], probs: np.ndarray) -> int:
    """About how many picks until the first slot runs out (a block of draws a little longer wastes little)."""
    live = probs > 0
    if not live.any():
        return 1
    share = probs[live] / probs[live].sum()
    return int(min(np.asarray(left, np.float64)[live] / share)) + 1
