"""energon's batch order: each worker of a rank reads its own stream of samples, batches it alone, and the loader
takes one batch from each worker in turn (torch's DataLoader order, skipping workers that are done).

- validation (`val_schedule`): a worker's stream is its slices of the datasets one after the other (energon's
  sharder split, energon_len.worker_ranges, rotated per dataset by the samples of the datasets before it); a val
  `limit` gives each worker its share of the batches (energon's LimitDataset);
- training (`train_schedule`): a worker's stream is energon's training order for that worker
  (energon/train_order.py: its sequences shuffled per epoch, read `parallel_shard_iters` at a time, repeated,
  blended, shuffled in a buffer), endless unless `repeat=False`.

Both count in energon's index space of each dataset, which keeps the samples split.yaml excludes one by one
(`gaps`, SplitSource.excluded): energon slices and shuffles it as is and skips those samples as it reads them, so a
worker's stream is its share of that space minus them, given as split rows.

A worker's stream is cut into batches of `batch_size` (its last batch partial, or dropped with `drop_last`).
`WorkerSchedule.slots(b)` gives the (source, row) of the samples of this rank's b-th batch, like
BatchSchedule.slots gives those of the global batches; `worker_of(b)` the worker that forms it.
"""

from __future__ import annotations

import itertools
import math
import zlib
from collections.abc import Iterator

import numpy as np

from energon_arrow.energon.energon_len import rotation_offsets, worker_ranges
from energon_arrow.energon.sample_loader import EMPTY, ROW_BITS, ROW_MASK, SampleLoader
from energon_arrow.energon.train_order import Blend, Repeat, ShuffleBuffer
from energon_arrow.energon.train_stream import TrainStream, from_json, to_json
from energon_arrow.loader.errors import LoaderError
from energon_arrow.loader.split_rows import rows_before


class SegmentStream:
    """A validation worker's stream: its (source, start, end) slices one after the other."""

    def __init__(self, segments: list[tuple[int, int, int]]):
        self.segments = segments
        self.length = sum(e - s for _, s, e in segments)

    def items(self, lo: int, hi: int) -> np.ndarray:
        parts, at = [], 0
        for d, s, e in self.segments:
            a, z = max(lo, at), min(hi, at + e - s)
            if a < z:
                parts.append(np.arange(s + a - at, s + z - at, dtype=np.int64) | np.int64(d << ROW_BITS))
            at += e - s
        return np.concatenate(parts) if parts else EMPTY


def limit_share(limit: int | None, worker: int, workers: int) -> int | None:
    """Worker `worker`'s share of a rank's `limit` batches or outputs (energon's LimitDataset)."""
    if limit is None or workers <= 1:
        return limit
    return limit // workers + (worker < limit % workers)


class WorkerSchedule:
    gives_rows = True  # slots() gives table rows, not positions in an epoch order

    def __init__(
        self,
        streams: list,
        lengths: list[int] | None,
        batch_size: int,
        drop_last: bool = False,
        limit: int | None = None,
    ):
        """`lengths`: each stream's items (None: endless streams); `limit`: batches per pass (energon's val
        LimitDataset: each worker its share)."""
        self.streams, self.lengths, self.batch_size = streams, lengths, int(batch_size)
        workers = len(streams)
        self.workers = workers
        #: endless streams: the samples each worker had read and the worker forming batch 0 (a resumed state)
        self.starts, self.turn = [0] * workers, 0
        if lengths is None:
            self.rank_batches = None
            return
        per_worker = [n // batch_size if drop_last else -(-n // batch_size) for n in lengths]
        if limit is not None:
            per_worker = [min(n, limit_share(limit, w, workers)) for w, n in enumerate(per_worker)]
        worker = np.repeat(np.arange(workers), per_worker)
        index = np.concatenate([np.arange(n) for n in per_worker]) if per_worker else np.zeros(0, np.int64)
        order = np.lexsort((worker, index))  # round robin: each worker's i-th batch, then the (i+1)-th
        self.worker, self.index = worker[order], index[order]
        #: batches this rank yields in one pass (None: endless)
        self.rank_batches = len(order)

    def worker_of(self, b: int) -> int:
        return (self.turn + b) % self.workers if self.rank_batches is None else int(self.worker[b])

    def place(self, b: int, slot: int) -> tuple[int, int, int]:
        """(worker, that worker's batch index, its sample index) of the slot-th sample of this rank's batch b."""
        if self.rank_batches is None:
            w, i = (self.turn + b) % self.workers, b // self.workers
            return w, i, self.starts[w] + i * self.batch_size + slot
        w, i = int(self.worker[b]), int(self.index[b])
        return w, i, i * self.batch_size + slot

    def positions(self, batches: int) -> tuple[list[int], int]:
        """Endless streams, after this rank's first `batches` batches: the samples each worker has read and the
        worker that forms the next batch."""
        W, bs = self.workers, self.batch_size
        done = [batches // W + ((w - self.turn) % W < batches % W) for w in range(W)]
        return [s + d * bs for s, d in zip(self.starts, done)], (self.turn + batches) % W

    def resume(self, samples: list[int], turn: int) -> None:
        """Continue endless streams from `positions` (each worker's samples read, the next worker): batch 0 is
        then the next batch."""
        if self.rank_batches is not None or len(samples) != self.workers:
            raise LoaderError(
                f"a state of {len(samples)} worker streams cannot resume {self.workers} workers"
                + (" of a finite pass" if self.rank_batches is not None else "")
            )
        self.starts, self.turn = [int(x) for x in samples], int(turn) % self.workers

    # ---- stream snapshots (TrainStream) --------------------------------------------------------------------
    def sent_snapshots(self) -> list[tuple[int, int, dict]]:
        """(worker, position, snapshot) of the snapshots the streams took since the last call."""
        out = []
        for w, stream in enumerate(self.streams):
            box = getattr(stream, "outbox", None)
            if box:
                out.extend((w, pos, snap) for pos, snap in box)
                stream.outbox = []
        return out

    def adopt(self, sent: list[tuple[int, int, dict]]) -> None:
        """Keep the snapshots a worker sent (`sent_snapshots`) with this process's streams."""
        for w, pos, snap in sent:
            self.streams[w].adopt(pos, snap)

    def saved_streams(self, batches: int) -> list[dict | None] | None:
        """For a loader state after this rank's first `batches` batches: each training stream's latest snapshot at
        or before the sample its worker reads next (None where it has none), or None for validation streams."""
        if not all(isinstance(s, TrainStream) for s in self.streams):
            return None
        if self.rank_batches is None:
            at = self.positions(batches)[0]
        else:
            done = np.bincount(self.worker[: min(batches, self.rank_batches)], minlength=self.workers)
            at = (done * self.batch_size).tolist()
        out: list[dict | None] = []
        for stream, pos in zip(self.streams, at):
            snap = stream.snapshot_at(pos)
            out.append(
                None
                if snap is None
                else {"stream": stream.identity, "at": snap[0], "stages": to_json(snap[1])}
            )
        return out

    def restore_streams(self, saved: list) -> None:
        """Adopt the snapshots of a saved state (`saved_streams`) that belong to these streams (same identity)."""
        for stream, entry in zip(self.streams, saved):
            if (
                isinstance(entry, dict)
                and isinstance(stream, TrainStream)
                and entry.get("stream") == stream.identity
            ):
                stream.adopt(int(entry["at"]), from_json(entry["stages"]))

    def reader_chunks(self, start: int, k: int, n: int) -> Iterator[int]:
        """The batches DataLoader worker k of n reads, from this rank's batch `start` on: those of one energon
        worker, so that each worker's stream is encoded in order by one process (energon/hooks.py numbers
        generator outputs by their count); torch's round robin over the readers, skipping finished ones, still
        delivers them in batch order."""
        if self.rank_batches is None:
            return itertools.count(start + k, n)
        if n != self.workers:
            return iter(range(start + k, self.rank_batches, n))
        rest = self.worker[start:]
        _, first = np.unique(rest, return_index=True)
        readers = rest[np.sort(first)]  # the workers left, in the order their next batch comes
        if k >= len(readers):
            return iter(())
        return iter((start + np.flatnonzero(rest == readers[k])).tolist())

    def slots(
        self, b: int, start: int = 0, end: int = 0, limit: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(source, row) of each sample of this rank's batch b (empty past the last); `start`, `end`, `limit`
        (BatchSchedule's slice of a global batch) do not apply: b is this rank's own batch."""
        start = 0
        if self.rank_batches is None:
            w, i = (self.turn + b) % self.workers, b // self.workers
            start = self.starts[w]
        elif b >= self.rank_batches:
            return EMPTY, EMPTY
        else:
            w, i = int(self.worker[b]), int(self.index[b])
        hi = start + (i + 1) * self.batch_size
        if self.lengths is not None:
            hi = min(hi, self.lengths[w])
        items = self.streams[w].items(start + i * self.batch_size, hi)
        return items >> ROW_BITS, items & ROW_MASK


def val_schedule(
    sizes: list[int],
    batch_size: int,
    rank: int,
    world_size: int,
    num_workers: int,
    drop_last: bool = False,
    limit: int | None = None,
    rotation_sizes: list[int] | None = None,
    gaps: list | None = None,
) -> WorkerSchedule:
    """`sizes`: each dataset's positions in energon's index space; `gaps`: each one's excluded samples there (None:
    none). A worker's slice of a dataset is a range of positions, so its kept samples are a range of rows."""
    rotations = rotation_offsets(rotation_sizes or sizes, world_size, num_workers)
    ranges = [worker_ranges(n, rank, world_size, num_workers, rot) for n, rot in zip(sizes, rotations)]
    for d, g in enumerate(gaps or ()):
        if g is not None and len(g):
            ranges[d] = [(int(rows_before(g, a)), int(rows_before(g, b))) for a, b in ranges[d]]
    streams = [
        SegmentStream([(d, *ranges[d][w]) for d in range(len(sizes))]) for w in range(max(1, num_workers))
    ]
    return WorkerSchedule(streams, [s.length for s in streams], batch_size, drop_last, limit)


def train_pipeline(
    w: int,
    *,
    offsets: list[list[list[int]]],
    sizes: list[int],
    seed: int,
    over_epochs: list,
    parallel: int,
    weights: list[float] | None,
    repetitions: list[float] | None,
    repeat: bool,
    shuffle_buffer: int | None,
    gaps: list | None = None,
    factory_sizes: list[int] | None = None,
):
    """The stages energon's `build_train_datasets` chains for worker w (`offsets`: per dataset, per worker, its
    sequence boundaries in energon's index space; `sizes`: each dataset's positions there; `gaps`: each one's
    excluded samples there; a blend's `weights` or a blend_epochized's `repetitions`, else neither;
    `factory_sizes`: each dataset's `len(factory)`, by which energon weighs the datasets of a blend_epochized - the
    whole split for a `subset:`, the primary's split for a join - default `sizes`)."""
    gaps = gaps or [None] * len(sizes)
    loaders = [
        SampleLoader(d, offsets[d][w], over_epochs[d], parallel, seed, gaps[d]) for d in range(len(sizes))
    ]
    if weights is not None or (repetitions is None and repeat):  # DATASET_WEIGHT, or NONE repeating each
        stages = [Repeat(loader, None) for loader in loaders]
        mix = [1.0] * len(sizes) if weights is None else [float(x) for x in weights]
        repeat = False
    else:  # SAMPLE_REPETITIONS, or NONE without repeat: each dataset once (or r times), blended by length
        reps = repetitions if repetitions is not None else [None] * len(sizes)
        stages = [loader if r in (None, 1) else Repeat(loader, r) for loader, r in zip(loaders, reps)]
        mix = [n * (1 if r is None else r) for n, r in zip(factory_sizes or sizes, reps)]
    stage = Blend(stages, mix, seed) if len(stages) > 1 else stages[0]
    if repeat:
        stage = Repeat(stage, None)
    if shuffle_buffer is not None and shuffle_buffer > 1:
        stage = ShuffleBuffer(stage, shuffle_buffer, seed)
    return stage


def train_schedule(
    sizes: list[int],
    offsets: list[list[list[int]]],
    batch_size: int,
    worker_config,
    *,
    parallel_shard_iters: int | None,
    over_epochs: list,
    weights: list[float] | None,
    repetitions: list[float] | None,
    repeat: bool,
    shuffle_buffer: int | None,
    drop_last: bool = False,
    gaps: list | None = None,
    factory_sizes: list[int] | None = None,
) -> WorkerSchedule:
    """This rank's training batches in energon's order (see the module docstring; `offsets`: per dataset, per
    worker of the rank, its sequence boundaries, energon_len.worker_slice_offsets; `sizes`, `offsets` in energon's
    index space, `gaps`: each dataset's excluded samples there; `factory_sizes`: see train_pipeline)."""
    wc = worker_config
    workers = max(1, wc.num_workers)
    common = dict(
        offsets=offsets,
        sizes=sizes,
        over_epochs=over_epochs,
        parallel=16 if parallel_shard_iters is None else parallel_shard_iters,
        weights=weights,
        repetitions=repetitions,
        repeat=repeat,
        shuffle_buffer=shuffle_buffer,
        gaps=gaps,
        factory_sizes=factory_sizes,
    )

    def stream(w: int) -> TrainStream:
        seed = wc.worker_seed(w if wc.num_workers else None)
        own = np.concatenate([np.asarray(o[w], np.int64) for o in offsets] or [EMPTY])
        identity = f"{seed}:{len(own)}:{zlib.crc32(own.tobytes()):08x}"
        return TrainStream(lambda: train_pipeline(w, seed=seed, **common), identity)

    streams = [stream(w) for w in range(workers)]
    endless = repeat or weights is not None or -1 in over_epochs
    lengths = (
        None
        if endless
        else [finite_length([o[w] for o in offsets], over_epochs, repetitions, gaps) for w in range(workers)]
    )
    return WorkerSchedule(streams, lengths, batch_size, drop_last)


class WorkerIndex:
    """TaskHooks.worker_index for a WorkerSchedule: (b, slot) -> (worker, worker seed, batch index, sample index),
    the indices counted as energon counts them: each worker numbers its k-th batch / sample k * workers + worker."""

    def __init__(self, schedule: WorkerSchedule, worker_config):
        self.schedule, self.workers = schedule, schedule.workers
        wc = worker_config
        self.seeds = [wc.worker_seed(w if wc.num_workers else None) for w in range(schedule.workers)]
        self._key: tuple | None = None  # the batch (and schedule state) `_first` was computed for
        self._first: tuple[int, int, int, int] = (0, 0, 0, 0)

    def __call__(self, b: int, slot: int) -> tuple[int, int, int, int]:
        schedule, n = self.schedule, self.workers
        key = (b, schedule.turn, tuple(schedule.starts))  # a resumed schedule moves its starts
        if key != self._key:  # once per batch: a slot's sample index is the first's plus slot * workers
            w, i, pos = schedule.place(b, 0)
            self._key, self._first = key, (w, self.seeds[w], i * n + w, pos * n + w)
        w, seed, batch_index, first = self._first
        return w, seed, batch_index, first + slot * n


def finite_length(
    offsets: list[list[int]], over_epochs: list, repetitions: list[float] | None, gaps: list | None = None
) -> int:
    """Samples a worker yields in one finite training pass (repeat=False): each dataset's epoch (k passes over its
    sequences with shuffle_over_epochs k, less the excluded samples, `gaps`) once, or `repetitions` times with
    the last pass cut at floor(len_worker * frac), len_worker counting the excluded samples, as energon's
    RepeatDataset counts; a blend of finite datasets yields them all."""
    total = 0
    for d, o in enumerate(offsets):
        n = o[-1] - o[0]
        g = None if gaps is None else gaps[d]
        kept = n if g is None or not len(o) else int(rows_before(g, o[-1]) - rows_before(g, o[0]))
        epoch = kept * (1 if over_epochs[d] is None else over_epochs[d])
        r = None if repetitions is None else repetitions[d]
        if r in (None, 1):
            total += epoch
        else:
            whole = math.floor(r)
            total += whole * epoch + min(math.floor(n * (r - whole)), epoch)
    return total
