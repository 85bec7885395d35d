"""Batches from encoded samples when they are not one batch per read chunk ("stream mode").

The workers read chunk c (this rank's slice of global batch c of the sample order) and return its encoded
samples; when a task encoder groups samples (`batch_group_criterion`), may yield several outputs per sample
(generator hooks), or the loader is unbatched (`batch_size=None`), the main process forms the batches here, in
chunk order, so the batches do not depend on the worker count:

- grouped: each sample goes to its group's bucket (key and batch size from `batch_group_criterion`, or the fixed
  `batch_size`); a full bucket becomes a batch; at the end of a finite pass the partial buckets are batched in
  the order the groups first appeared, unless drop_last (energon's GroupBatchDataset);
- batched: one bucket of `batch_size`; the last partial batch as above (energon's BatchDataset);
- unbatched: every sample is an output;
- packing (`packing_buffer_size`): the samples go through energon/packing.py first; its packs are grouped /
  batched as above.

State (plain JSON): the chunks consumed live in the loader state; this holds the samples waiting in buckets and
the outputs not yet yielded, each as `[chunk, index in the chunk's encoded samples]` (a pack: its samples' refs
and its output index), and the partial packing window. Restoring re-encodes those
chunks (hooks marked `@stateless(restore_seeds=True)` reproduce their randomness) and regroups them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterator
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
    def __init__(
        self,
        hooks: TaskHooks,
        batch_size: int | None,
        drop_last: bool,
        limit: int | None = None,
        packing_buffer_size: int | None = None,
    ):
        self.hooks, self.batch_size, self.drop_last, self.limit = hooks, batch_size, drop_last, limit
        self.grouped = hooks.group_fn is not None
        self.packer = Packer(hooks, packing_buffer_size) if packing_buffer_size is not None else None
        self.reset()

    def reset(self) -> None:
        """Start a new pass."""
        if self.packer is not None:
            self.packer.reset()
        self.buckets: dict[Hashable, _Bucket] = {}
        # entries [refs, outputs, consumed, batch index or None (unbatched)]
        self.queue: deque[list] = deque()
        self.formed = 0  # batches formed this pass (the batch index the hooks see)
        self.yielded = 0  # outputs yielded this pass
        self.finished = False

    # ---- feeding -----------------------------------------------------------------------------------------
    def _bucket_of(self, sample: Any) -> _Bucket | None:
        if not self.grouped:
            key, size = None, self.batch_size
        else:
            got = self.hooks.group_of(sample, self.formed)
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
        self.queue.append([refs, self.hooks.batches(samples, self.formed), 0, self.formed])
        self.formed += 1

    def feed(self, chunk: int, samples: list) -> None:
        """Add the encoded samples of `chunk` (packed first when packing)."""
        refs = [(chunk, i) for i in range(len(samples))]
        if self.packer is None:
            self._place(samples, refs)
            return
        packs = [p for ref, s in zip(refs, samples) for p in self.packer.add(ref, s, self.formed)]
        self._place([p for _, p in packs], [r for r, _ in packs])

    def _place(self, samples: list, refs: list) -> None:
        """Put samples (or packs) with their refs into the buckets / the output queue."""
        if self.batch_size is None and not self.grouped:
            if samples:
                self.queue.append([list(refs), list(samples), 0, None])
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
            packs = self.packer.flush(self.formed)
            self._place([p for _, p in packs], [r for r, _ in packs])
        if not self.finished and not self.drop_last:
            for bucket in self.buckets.values():
                if bucket.samples:
                    self._form(bucket)
        self.finished = True

    def drain(self) -> Iterator[Any]:
        """The outputs ready to be yielded, in order (stops at the val limit)."""
        while self.queue:
            if self.limit is not None and self.yielded >= self.limit:
                self.queue.clear()
                self.finished = True
                return
            entry = self.queue[0]
            refs, outputs, consumed, _ = entry
            if consumed >= len(outputs):
                self.queue.popleft()
                continue
            entry[2] += 1
            self.yielded += 1
            yield outputs[consumed]

    @property
    def at_limit(self) -> bool:
        return self.limit is not None and self.yielded >= self.limit

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
            "yielded": self.yielded,
            "finished": self.finished,
        }
        if self.packer is not None:
            state["packing"] = self.packer.state()
        return state

    def restore(self, state: dict, encoded_chunk: Callable[[int], list]) -> None:
        """Rebuild the buckets and the output queue of `state`, re-encoding the chunks they come from."""
        self.reset()
        self.formed = int(state["formed"])
        chunks: dict[int, list] = {}

        packs: dict[tuple, list] = {}

        def sample_at(c: int, i: int) -> Any:
            if c not in chunks:
                chunks[c] = encoded_chunk(c)
            if i >= len(chunks[c]):
                raise LoaderError(
                    f"loader state refers to sample {i} of chunk {c}, which now encodes to {len(chunks[c])} "
                    f"samples: {_NOT_DETERMINISTIC}"
                )
            return chunks[c][i]

        def item_at(ref: tuple, index: int) -> Any:
            if not isinstance(ref[0], tuple):
                return sample_at(*ref)
            group, k = ref
            if group not in packs:
                if self.packer is None:
                    raise LoaderError("loader state holds packed samples, but this loader does not pack")
                packs[group] = self.packer.pack(group, [sample_at(*r) for r in group], index)
            if k >= len(packs[group]):
                raise LoaderError(f"loader state refers to pack output {k} of {group}: {_NOT_DETERMINISTIC}")
            return packs[group][k]

        def samples_of(refs: list, index: int | None = None) -> list:
            return [item_at(r, self.formed if index is None else index) for r in refs]

        if self.packer is not None:
            if "packing" not in state:
                raise LoaderError("loader state has no packing state, but this loader packs samples")
            self.packer.restore(state["packing"], samples_of)
        for entry in state["queue"]:
            refs = [_ref_of(r) for r in entry["refs"]]
            samples = samples_of(refs, entry["batch"])
            index = entry["batch"]
            outputs = samples if index is None else self.hooks.batches(samples, index)
            self.queue.append([refs, outputs, int(entry["consumed"]), index])
        for refs in state["buckets"]:
            refs = [_ref_of(r) for r in refs]
            self._place(samples_of(refs), refs)
        self.yielded = int(state["yielded"])
        self.finished = bool(state["finished"])
