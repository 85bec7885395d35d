"""`TrainStream`: a training worker's stream of items (energon/train_order.py), computed as far as asked, with
snapshots to start again from; `to_json` / `from_json`: snapshots in a JSON-able loader state.

Computing a stream to position p costs ~0.6-0.8 us per item (the draws in bulk, energon's order of slices, the
shuffle buffer's pops), so a stream resumed deep into a long training (hundreds of millions of samples per worker)
would take minutes to get back there, where energon restores its workers' saved states at once. At every multiple
of `SNAPSHOT_EVERY` items a stream snapshots its stages (each stage's `snapshot()`: a dict of a few KB of numbers
and numpy arrays); a DataLoader worker sends the snapshots its streams take to the main process with its batches
(loader/dataset.py), which keeps them with its own streams and saves the one each stream resumes from in the
loader's state (energon/savable_loader.py), so a restore computes at most `SNAPSHOT_EVERY` items again.
"""

from __future__ import annotations

import base64

import numpy as np

from energon_arrow.energon.sample_loader import EMPTY
from energon_arrow.energon.torch_draws import BLOCK

SNAPSHOT_EVERY = 1 << 17  # items between two snapshots of a stream: what a restore computes again at most
# the latest snapshots a stream keeps (a worker's plans run far less than one interval ahead)
KEPT_SNAPSHOTS = 4


class TrainStream:
    """A training worker's stream, computed as far as asked and kept from the lowest position asked last. The
    snapshots it takes go to `outbox` (for the main process), and any snapshot it is given (`adopt`) is a place to
    start from: a position before the kept items, or past the latest snapshot, is computed from the latest snapshot
    at or before it, else from the start. `identity` names the stream (its worker's seed and sequences): a saved
    snapshot is only adopted by the stream it was taken from."""

    def __init__(self, build, identity: str = ""):
        self.build, self.identity = build, identity
        self.snapshots: list[tuple[int, dict]] = []  # (position, snapshot of the stages there), by position
        self.outbox: list[tuple[int, dict]] = []  # snapshots taken here, not sent yet
        self._start(0)

    def _start(self, lo: int) -> None:
        found = self.snapshot_at(lo)
        self.stage = self.build()
        if found is None:
            self.done = not self.stage.begin()
            self.base = 0
        else:  # a snapshot is taken between two reads of a begun, unfinished stage
            self.stage.restore(found[1])
            self.done, self.base = False, found[0]
        self.buf, self._last = EMPTY, self.base

    def snapshot_at(self, pos: int) -> tuple[int, dict] | None:
        """The latest snapshot at or before `pos`."""
        best = None
        for snap in self.snapshots:
            if snap[0] <= pos:
                best = snap
        return best

    def adopt(self, pos: int, snap: dict) -> None:
        if all(p != pos for p, _ in self.snapshots):
            self.snapshots = sorted([*self.snapshots, (pos, snap)], key=lambda s: s[0])[-KEPT_SNAPSHOTS:]

    def items(self, lo: int, hi: int) -> np.ndarray:
        found = self.snapshot_at(lo)
        if lo < self.base or (found is not None and found[0] > self.base + len(self.buf)):
            self._start(lo)
        while self.base + len(self.buf) < hi and not self.done:
            at = self.base + len(self.buf)
            if at - self._last >= SNAPSHOT_EVERY:
                taken = (at, self.stage.snapshot())
                self.outbox.append(taken)
                self.adopt(*taken)
                self._last = at
            # reads stop at the next snapshot: snapshots lie at multiples of SNAPSHOT_EVERY
            more = self.stage.read(min(max(BLOCK, hi - at), self._last + SNAPSHOT_EVERY - at))
            self.done = not len(more)
            self.buf = np.concatenate([self.buf, more])
        cut = min(lo - self.base, len(self.buf))
        self.buf, self.base = self.buf[cut:], self.base + cut
        return self.buf[: hi - lo]


def to_json(value):
    """A snapshot with its numpy arrays as {"array": dtype, "b64": bytes}: JSON-able."""
    if isinstance(value, np.ndarray):
        return {
            "array": value.dtype.str,
            "b64": base64.b64encode(np.ascontiguousarray(value).tobytes()).decode(),
        }
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def from_json(value):
    """The snapshot `to_json` wrote, with its arrays back."""
    if isinstance(value, dict):
        if set(value) == {"array", "b64"}:
            dtype = np.dtype(value["array"])
            data = np.frombuffer(base64.b64decode(value["b64"], validate=True), dtype)
            return data.astype(dtype.newbyteorder("="))
        return {k: from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_json(v) for v in value]
    return value
