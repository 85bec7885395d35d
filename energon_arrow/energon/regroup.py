"""Batches from encoded samples when they are not one batch per read chunk ("stream mode").

The workers read chunk c (this rank's slice of global batch c of the sample order) and return its encoded
samples; when a task encoder groups samples (`batch_group_criterion`), may yield several outputs per sample
(generator hooks), or the loader is unbatched (`batch_size=None`), the main process forms the batches here, in
chunk order. A Regrouper batches one stream: in energon's order one energon worker's (energon/worker_regroup.py
keeps one per worker, as energon batches and packs inside each worker), else the rank's whole stream (then the
batches do not depend on the worker count):

- grouped: each sample goes to its group's bucket (key and batch size from `batch_group_criterion`, or the fixed
  `batch_size`); a full bucket becomes a batch; at the end of a finite pass the partial buckets are batched in
  the order the groups first appeared, unless drop_last (energon's GroupBatchDataset);
- batched: one bucket of `batch_size`; the last partial batch as above (energon's BatchDataset);
- unbatched: every sample is an output;
- packing (`packing_buffer_size`): the samples go through energon/packing.py first; its packs are grouped /
  batched as above.

State (plain JSON): the chunks consumed live in the loader state; this holds the samples waiting in buckets and
the outputs not yet yielded, each as `[chunk, index in the chunk's encoded samples]` (a pack: its samples' refs
and its output index), the partial packing window and the counts. Restoring re-encodes those chunks (hooks
marked `@stateless(restore_seeds=True)` reproduce their randomness) and regroups them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from typing import Any

from energon_arrow.energon.hooks import TaskHooks
from energon_arrow.energon.packing import Packer
from energon_arrow.loader.errors import LoaderError

Ref = tuple[int, int]
_NOT_DETERMINISTIC = (
    "the task encoder is not deterministic (mark random hooks @stateless(restore_seeds=True))"
)


def _ref_json(ref: tuple) -> list:
    """A sample ref [chunk, index] or a pack ref [[[chunk, index], ...], output index] as plain JSON."""
    if isinstance(ref[0], tuple):
        return [[list(r) for r in ref[0]], ref[1]]
    return list(ref)


def _ref_of(value: list) -> tuple:
    if isinstance(value[0], list):
        return tuple(tuple(r) for r in value[0]), int(value[1])
    return int(value[0]), int(value[1])


class _Bucket:
    def __init__(self, size: int):
        self.size, self.refs, self.samples = size, [], []


class Regrouper:
    """The batches of one stream of chunks: one energon worker's (energon/worker_regroup.py deals the chunks)."""

    def __init__(
        self,
        hooks: TaskHooks,
        batch_size: int | None,
        drop_last: bool,
        limit: int | None = None,
        packing_buffer_size: int | None = None,
        worker: int = 0,
        workers: int = 1,
    ):
        """`limit`: outputs per pass; `worker` of `workers`: the hooks see this worker's k-th batch (output when
        unbatched) as batch k * workers + worker, as energon numbers them."""
        self.hooks, self.batch_size, self.drop_last, self.limit = hooks, batch_size, drop_last, limit
        self.worker, self.workers = worker, workers
        self.grouped = hooks.group_fn is not None
        self.unbatched = batch_size is None and not self.grouped
        self.packer = Packer(hooks, packing_buffer_size) if packing_buffer_size is not None else None
        self.reset()

    def reset(self) -> None:
        """Start a new pass."""
        if self.packer is not None:
            self.packer.reset()
        self.buckets: dict[Hashable, _Bucket] = {}
        # entries [refs, outputs, consumed, batch index]; unbatched: one per output, its index
        self.queue: deque[list] = deque()
        self.formed = 0  # batches (unbatched: outputs) formed this pass
        self.received = 0  # encoded samples fed this pass
        self.yielded = 0  # outputs yielded this pass
        self.finished = False

    @property
    def index(self) -> int:
        """The batch index the hooks see for the batch being formed."""
        return self.formed * self.workers + self.worker

    # ---- feeding -----------------------------------------------------------------------------------------
    def _bucket_of(self, sample: Any) -> _Bucket | None:
        if not self.grouped:
            key, size = None, self.batch_size
        else:
            got = self.hooks.group_of(sample, self.index)
            if not got:
                return None  # batch_group_criterion skipped / failed on this sample
            key, size = got[0]
            if (size is None) == (self.batch_size is None):
                raise LoaderError(
                    f"batch_group_criterion returned batch size {size!r} for group {key!r} while batch_size="
                    f"{self.batch_size!r}: exactly one of the two must be None"
                )
            size = size if size is not None else self.batch_size
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.buckets[key] = _Bucket(size)
        elif bucket.size != size:
            raise LoaderError(f"group {key!r} changed its batch size from {bucket.size} to {size}")
        return bucket

    def _form(self, bucket: _Bucket) -> None:
        refs, samples = bucket.refs, bucket.samples
        bucket.refs, bucket.samples = [], []
        self.queue.append([refs, self.hooks.batches(samples, self.index), 0, self.index])
        self.formed += 1

    def feed(self, chunk: int, samples: list) -> None:
        """Add the encoded samples of `chunk` (packed first when packing)."""
        refs = [(chunk, i) for i in range(len(samples))]
        self.received += len(samples)
        if self.packer is None:
            self._place(samples, refs)
            return
        packs = [p for ref, s in zip(refs, samples) for p in self.packer.add(ref, s, self.index)]
        self._place([p for _, p in packs], [r for r, _ in packs])

    def _place(self, samples: list, refs: list) -> None:
        """Put samples (or packs) with their refs into the buckets / the output queue."""
        if self.unbatched:
            for ref, sample in zip(refs, samples):
                self.queue.append([[ref], [sample], 0, self.index])
                self.formed += 1
            return
        for ref, sample in zip(refs, samples):
            bucket = self._bucket_of(sample)
            if bucket is None:
                continue
            bucket.refs.append(ref)
            bucket.samples.append(sample)
            if len(bucket.samples) >= bucket.size:
                self._form(bucket)

    def finish(self) -> None:
        """End of a finite pass: batch the partial buckets (unless drop_last)."""
        if not self.finished and self.packer is not None:
            packs = self.packer.flush(self.index)
            self._place([p for _, p in packs], [r for r, _ in packs])
        if not self.finished and not self.drop_last:
            for bucket in self.buckets.values():
                if bucket.samples:
                    self._form(bucket)
        self.finished = True

    def take(self) -> tuple[Any, list] | None:
        """The next output and the queue entry it comes from; None when none is ready (or at the val limit)."""
        while self.queue and not self.at_limit:
            entry = self.queue[0]
            if entry[2] < len(entry[1]):
                entry[2] += 1
                self.yielded += 1
                return entry[1][entry[2] - 1], entry
            self.queue.popleft()
        if self.at_limit:
            self.queue.clear()
            self.finished = True
        return None

    @property
    def at_limit(self) -> bool:
        return self.limit is not None and self.yielded >= self.limit

    @property
    def done(self) -> bool:
        """This pass is over: finished and its queue left behind (`take` found it empty), or at the val limit."""
        return self.at_limit or self.finished and not self.queue

    # ---- state -------------------------------------------------------------------------------------------
    def state(self) -> dict:
        state = {
            "buckets": [[_ref_json(r) for r in b.refs] for b in self.buckets.values() if b.refs],
            "queue": [
                {"refs": [_ref_json(r) for r in refs], "consumed": consumed, "batch": index}
                for refs, outputs, consumed, index in self.queue
                if consumed < len(outputs)
            ],
            "formed": self.formed,
            "received": self.received,
            "yielded": self.yielded,
            "finished": self.finished,
        }
        if self.packer is not None:
            state["packing"] = self.packer.state()
        return state

    def restore(self, state: dict, encoded_chunk: Callable[[int, int], list]) -> None:
        """Rebuild the buckets and the output queue of `state`, re-encoding the chunks they come from
        (`encoded_chunk(chunk, batch)`: its encoded samples as made for the batch with that index)."""
        self.reset()
        self.formed = int(state["formed"])
        chunks: dict[tuple[int, int], list] = {}
        packs: dict[tuple, list] = {}

        def sample_at(c: int, i: int, index: int) -> Any:
            key = (c, index if self.hooks.per_batch is not None else 0)  # else made alike for any batch
            if key not in chunks:
                chunks[key] = encoded_chunk(c, index)
            got = chunks[key]
            if i >= len(got):
                raise LoaderError(
                    f"loader state refers to sample {i} of chunk {c}, which now encodes to {len(got)} "
                    f"samples: {_NOT_DETERMINISTIC}"
                )
            return got[i]

        def item_at(ref: tuple, index: int) -> Any:
            if not isinstance(ref[0], tuple):
                return sample_at(*ref, index)
            group, k = ref
            if (group, index) not in packs:
                if self.packer is None:
                    raise LoaderError("loader state holds packed samples, but this loader does not pack")
                packs[group, index] = self.packer.pack(group, [sample_at(*r, index) for r in group], index)
            if k >= len(packs[group, index]):
                raise LoaderError(f"loader state refers to pack output {k} of {group}: {_NOT_DETERMINISTIC}")
            return packs[group, index][k]

        def samples_of(refs: list, index: int | None = None) -> list:
            return [item_at(r, self.index if index is None else index) for r in refs]

        if self.packer is not None:
            if "packing" not in state:
                raise LoaderError("loader state has no packing state, but this loader packs samples")
            self.packer.restore(state["packing"], samples_of)
        for entry in state["queue"]:
            refs, index = [_ref_of(r) for r in entry["refs"]], int(entry["batch"])
            samples = samples_of(refs, index)
            outputs = samples if self.unbatched else self.hooks.batches(samples, index)
            self.queue.append([refs, outputs, int(entry["consumed"]), index])
        for refs in state["buckets"]:
            refs = [_ref_of(r) for r in refs]
            self._place(samples_of(refs), refs)
        self.received = int(state["received"])
        self.yielded = int(state["yielded"])
        self.finished = bool(state["finished"])
