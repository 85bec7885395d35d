"""Batches from encoded samples when they are not one batch per read chunk ("stream mode").

The workers read chunk c (this rank's slice of global batch c of the sample order) and return its encoded
samples; when a task encoder groups samples (`batch_group_criterion`), may yield several outputs per sample
(generator hooks), or the loader is unbatched (`batch_size=None`), the main process forms the batches here, in
chunk order, so the batches do not depend on the worker count:

- grouped: each sample goes to its group's bucket (key and batch size from `batch_group_criterion`, or the fixed
  `batch_size`); a full bucket becomes a batch; at the end of a finite pass the partial buckets are batched in
  the order the groups first appeared, unless drop_last (energon's GroupBatchDataset);
- batched: one bucket of `batch_size`; the last partial batch as above (energon's BatchDataset);
- unbatched: every sample is an output.

State (plain JSON): the chunks consumed live in the loader state; this holds the samples waiting in buckets and
the outputs not yet yielded, each as `[chunk, index in the chunk's encoded samples]`. Restoring re-encodes those
chunks (hooks marked `@stateless(restore_seeds=True)` reproduce their randomness) and regroups them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterator
from typing import Any

from energon_arrow.loader.errors import LoaderError
from energon_arrow.loader.hooks import TaskHooks

Ref = tuple[int, int]


class _Bucket:
    def __init__(self, size: int):
        self.size, self.refs, self.samples = size, [], []


class Regrouper:
    def __init__(self, hooks: TaskHooks, batch_size: int | None, drop_last: bool, limit: int | None = None):
        self.hooks, self.batch_size, self.drop_last, self.limit = hooks, batch_size, drop_last, limit
        self.grouped = hooks.group_fn is not None
        self.reset()

    def reset(self) -> None:
        """Start a new pass."""
        self.buckets: dict[Hashable, _Bucket] = {}
        # entries [refs, outputs, consumed, batch index or None (unbatched)]
        self.queue: deque[list] = deque()
        self.formed = 0  # batches formed this pass (the batch index the hooks see)
        self.yielded = 0  # outputs yielded this pass
        self.finished = False

    # ---- feeding -----------------------------------------------------------------------------------------
    def _bucket_of(self, sample: Any, chunk: int) -> _Bucket | None:
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

    def feed(self, chunk: int, samples: list, refs: list[Ref] | None = None) -> None:
        """Add the encoded samples of `chunk` (or, when restoring, the samples of `refs`)."""
        refs = refs if refs is not None else [(chunk, i) for i in range(len(samples))]
        if self.batch_size is None and not self.grouped:
            if samples:
                self.queue.append([list(refs), list(samples), 0, None])
            return
        for ref, sample in zip(refs, samples):
            bucket = self._bucket_of(sample, chunk)
            if bucket is None:
                continue
            bucket.refs.append(ref)
            bucket.samples.append(sample)
            if len(bucket.samples) >= bucket.size:
                self._form(bucket)

    def finish(self) -> None:
        """End of a finite pass: batch the partial buckets (unless drop_last)."""
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
        return {
            "buckets": [[list(r) for r in b.refs] for b in self.buckets.values() if b.refs],
            "queue": [
                {"refs": [list(r) for r in refs], "consumed": consumed, "batch": index}
                for refs, outputs, consumed, index in self.queue
                if consumed < len(outputs)
            ],
            "formed": self.formed,
            "yielded": self.yielded,
            "finished": self.finished,
        }

    def restore(self, state: dict, encoded_chunk: Callable[[int], list]) -> None:
        """Rebuild the buckets and the output queue of `state`, re-encoding the chunks they come from."""
        self.reset()
        chunks: dict[int, list] = {}

        def samples_of(refs: list) -> list:
            out = []
            for c, i in refs:
                if c not in chunks:
                    chunks[c] = encoded_chunk(c)
                if i >= len(chunks[c]):
                    raise LoaderError(
                        f"loader state refers to sample {i} of chunk {c}, which now encodes to {len(chunks[c])} "
                        "samples: the task encoder is not deterministic (mark random hooks "
                        "@stateless(restore_seeds=True))"
                    )
                out.append(chunks[c][i])
            return out

        for entry in state["queue"]:
            refs = [tuple(r) for r in entry["refs"]]
            samples = samples_of(refs)
            index = entry["batch"]
            outputs = samples if index is None else self.hooks.batches(samples, index)
            self.queue.append([refs, outputs, int(entry["consumed"]), index])
        self.formed = int(state["formed"])
        for refs in state["buckets"]:
            refs = [tuple(r) for r in refs]
            self.feed(-1, samples_of(refs), refs)
        self.yielded = int(state["yielded"])
        self.finished = bool(state["finished"])
