"""`Loader`: iterates a `BatchDataset` through torch DataLoader workers, keeps an exact, plain resume state, and
hands batches to the GPU through the pinned transfer stage when CUDA is available (`device=None`: the current CUDA
device if any, else batches stay on the host; `device="cpu"` keeps them on the host). With a decoder's
`image_device_decode=True` the workers ship compressed images and the batches' images are decoded here, on that
device (images/gpu_decode.py).

State: `{"version", "next_batch", "settings": {...}}` (+ `"pass_open": true` when saved after the last batch of a
finite pass whose iterator was left before its end: the restored loader's next iteration ends that pass without a
batch, as energon's does) - JSON-able, no sample data. The batch sequence depends only
on the settings (seed, global batch size, ...), so a state saved with W ranks x K workers resumes exactly with any
other W' x K' as long as the global batch size is the same.
"""

from __future__ import annotations

import fcntl
import gc
from collections.abc import Iterator
from typing import Any

import torch

from energon_arrow.images.device import device_images, image_board
from energon_arrow.images.gpu_decode import device_decoded, device_decoder
from energon_arrow.loader.dataset import BatchDataset
from energon_arrow.loader.errors import LoaderError
from energon_arrow.loader.run_ahead import run_ahead
from energon_arrow.loader.schedule import BatchSchedule
from energon_arrow.loader.transfer import cuda_target, iter_to_device
from energon_arrow.loader.worker_failure import WorkerFailure, raise_failure

STATE_VERSION = 1
DECODE_AHEAD = 2  # batches decoded ahead of the consumer with image_device_decode=True (loader/run_ahead.py)
# The pipe that carries the workers' pickled batches to this process: Linux's default of 64 KiB holds less than one
# raw-bytes batch of the loader benchmark (~150 KB), so each batch took several blocking write/read rounds and
# context switches; at 1 MiB (the unprivileged limit, /proc/sys/fs/pipe-max-size) the local epoch ran 13% faster
# (median of 6 alternating runs each, 64k samples, 2 workers: 64k -> 73k samples/s).
RESULT_PIPE_BYTES = 1 << 20


def widen_result_pipe(batches: Any, size: int = RESULT_PIPE_BYTES) -> int:
    """Enlarge the pipe of a DataLoader iterator's worker result queue to `size` bytes (capped by the system's
    limit); returns the pipe's size after, or 0 where there is no such pipe or the platform has no pipe sizes
    (the queue then works as before, only with more context switches)."""
    queue = getattr(batches, "_worker_result_queue", None)
    reader = getattr(queue, "_reader", None)
    setsize = getattr(fcntl, "F_SETPIPE_SZ", None)
    if reader is None or setsize is None:
        return 0
    try:
        with open("/proc/sys/fs/pipe-max-size") as f:
            size = min(size, int(f.read()))
        return fcntl.fcntl(reader.fileno(), setsize, size)
    except (OSError, ValueError):
        return 0


def _as_is(item):
    """DataLoader's convert step, disabled: batches arrive exactly as the workers built them."""
    return item


class Loader:
    def __init__(
        self,
        dataset: BatchDataset,
        num_workers: int = 2,
        prefetch_factor: int = 2,
        device: str | torch.device | None = None,
        timeout: float = 0,
    ):
        if num_workers < 0:
            raise LoaderError(f"num_workers must be >= 0, got {num_workers}")
        self.dataset = dataset
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.device = device
        self.timeout = timeout
        self.next_batch = 0
        self.skipped = 0  # samples skipped (skip_errors): by the workers + by the image decode stage
        self._worker_skipped = self._decode_skipped = 0
        self._iterating = False
        #: every batch of a finite pass was delivered, but its iterator was left before its end: the next
        #: iteration ends the pass without a batch (as energon's, whose datasets then stand at their end)
        self._pass_open = False

    def __len__(self) -> int:
        """Batches this rank yields in one whole pass (finite streams only)."""
        n = self.dataset.rank_length()
        if n is None:
            raise TypeError("an endless (repeat=True) loader has no length")
        return n

    def _marked_batches(self) -> Iterator[tuple[tuple, Any]]:
        """(mark, batch) for each batch from the workers, `mark` = the loader's state once that batch is delivered
        (next_batch, pass_open, worker_skipped); a last (mark, None) ends the pass. It writes no state after its
        start, so a thread may run it ahead of the consumer (`_decoded_ahead`); `_delivered` applies a mark."""
        total = self.dataset.total_batches()
        if total is not None and self.next_batch >= total:
            if self._pass_open:  # left after its last batch: this iteration ends the pass
                self._pass_open = False
                return
            self.next_batch = 0  # a finished finite pass starts over
        self._pass_open = False
        self.dataset.start_batch = self.next_batch
        self.dataset.warm_plan()
        kwargs: dict[str, Any] = {}
        if self.num_workers > 0:
            kwargs = dict(
                num_workers=self.num_workers,
                prefetch_factor=self.prefetch_factor,
                timeout=self.timeout,
                multiprocessing_context="fork"
                if "fork" in torch.multiprocessing.get_all_start_methods()
                else None,
            )
        board = image_board(self.dataset, self.num_workers, self.prefetch_factor, self.device)
        self.dataset.image_slots = board
        dl = torch.utils.data.DataLoader(self.dataset, batch_size=None, collate_fn=_as_is, **kwargs)
        if self.num_workers > 0:
            # Forked workers inherit frozen objects: their collector never touches (and so copies) the parent's
            # pages. The parent unfreezes as soon as the workers exist; objects left frozen are never collected,
            # not even at interpreter exit, so native objects in cycles (DuckDB's) would be reported as leaked.
            gc.freeze()
            try:
                batches = iter(dl)  # forks the workers
            finally:
                gc.unfreeze()
            widen_result_pipe(batches)
        else:
            batches = iter(dl)
        expected, worker_skipped = self.next_batch, self._worker_skipped
        adopt = getattr(self.dataset.schedule, "adopt", None)  # the workers' stream snapshots, kept here
        try:
            for b, skipped, batch, leases, snapshots in batches:
                if isinstance(batch, WorkerFailure):
                    raise_failure(batch)
                if snapshots and adopt is not None:
                    adopt(snapshots)
                if b < expected:
                    raise LoaderError(f"internal: batch {b} delivered after batch {expected - 1}")
                if board is not None:
                    board.hold(batch, leases)
                expected = b + 1
                worker_skipped = max(worker_skipped, skipped)
                yield (expected, total is not None and expected >= total, worker_skipped), batch
        finally:
            self.dataset.image_slots = None  # the slots' memory goes with the last batches the user holds
            if board is not None:
                board.clear()  # unregisters the slots it registered with CUDA
        yield (max(expected, total) if total is not None else expected, False, worker_skipped), None

    def _delivered(self, mark: tuple) -> None:
        self.next_batch, self._pass_open, self._worker_skipped = mark
        self.skipped = self._worker_skipped + self._decode_skipped

    def _batches(self) -> Iterator[Any]:
        """The batches from the workers, the state moved as each is delivered."""
        items = self._marked_batches()
        try:
            for mark, batch in items:
                self._delivered(mark)
                if batch is not None:
                    yield batch
        finally:
            items.close()

    def _decoded_ahead(self, decoder) -> Iterator[Any]:
        """`image_device_decode=True`: the next batches taken from the workers (and their tensors sent to the
        device) in one thread and decoded in another, each up to DECODE_AHEAD ahead of the next stage
        (loader/run_ahead.py), so that receiving a batch (unpickling, mapping its slots: Python, under the GIL)
        overlaps the decode of the one before, and the decoding thread does nothing but decode; both run on one
        side stream, so a decode is ordered after its batch's copies. The state moves as each batch is delivered."""
        device = cuda_target(self.device)
        stream = torch.cuda.Stream(device=device) if device is not None else None
        received = run_ahead(
            iter_to_device(self._marked_batches(), self.device, depth=1), _as_is, stream, DECODE_AHEAD
        )
        for mark, batch in run_ahead(received, decoder, stream, DECODE_AHEAD):
            self._delivered(mark)
            if batch is not None:
                yield batch

    def __iter__(self) -> Iterator[Any]:
        if self._iterating:
            raise LoaderError("this loader is already being iterated")
        self._iterating = True
        decoder = device_decoder(self.dataset, self.device)  # image_device_decode=True: images decoded here
        base = self._decode_skipped
        try:
            if decoder is not None and type(self)._batches is Loader._batches:
                batches = self._decoded_ahead(decoder)
            else:  # the energon loaders' own _batches move more state per batch: decoded in line
                # depth 1: a batch is taken from the workers only when the previous one is delivered, so the
                # state counts delivered batches; the copy itself stays asynchronous (side stream)
                batches = device_decoded(iter_to_device(self._batches(), self.device, depth=1), decoder)
            for batch in device_images(batches, self.dataset, self.device):
                if decoder is not None:
                    self._decode_skipped = base + decoder.skipped
                    self.skipped = self._worker_skipped + self._decode_skipped
                yield batch
        finally:
            self._iterating = False

    def config(self) -> dict:
        """energon's `loader.config()`: the loader and its dataset as a nested dict (loader/loader_config.py), to
        store next to a checkpoint and compare on restore."""
        from energon_arrow.loader.loader_config import loader_config

        return loader_config(self)

    # ---- state -------------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            "version": STATE_VERSION,
            "next_batch": int(self.next_batch),
            "settings": self.dataset.settings.fingerprint(),
            "sources": [len(s) for s in self.dataset.sources],
        } | ({"pass_open": True} if self._pass_open else {})

    def load_state_dict(self, state: dict) -> None:
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise LoaderError(f"not a loader state of version {STATE_VERSION}: {state!r:.200}")
        ours = self.dataset.settings.fingerprint()
        saved = state["settings"]
        diff = {k: (saved.get(k), ours.get(k)) for k in {**saved, **ours} if saved.get(k) != ours.get(k)}
        if diff and set(diff) != {"global_batch_size"}:
            raise LoaderError(f"loader state was saved with different settings (saved, now): {diff}")
        if state["sources"] != [len(s) for s in self.dataset.sources]:
            raise LoaderError(
                f"loader state was saved for datasets of {state['sources']} samples, these have "
                f"{[len(s) for s in self.dataset.sources]}"
            )
        count, saved_batch_size = int(state["next_batch"]), saved["global_batch_size"]
        limit = self.dataset.limit
        if (
            saved_batch_size != ours["global_batch_size"]
            and limit is not None
            and count * saved_batch_size >= limit
        ):
            self.next_batch = self.dataset.total_batches()  # the saved pass had ended
        else:
            self.next_batch = self.rescaled(count, saved_batch_size)
        self._pass_open = bool(state.get("pass_open", False))

    def rescaled(self, count: int, saved_batch_size: int) -> int:
        """`count` batches of a state saved with global batch size `saved_batch_size` as batches of this loader's
        (e.g. after `energon-arrow checkpoint redist` to another world size, or a smaller micro batch): the same
        number of samples, so the stream resumes exactly where it stopped. Only where the sample order does not
        depend on the batch size (one dataset or a concatenation, not a blend) and the samples fill whole batches."""
        g = self.dataset.settings.global_batch_size
        if saved_batch_size == g:
            return count
        schedule = self.dataset.schedule
        if not isinstance(schedule, BatchSchedule) or schedule.blend:
            raise LoaderError(
                f"loader state was saved with global batch size {saved_batch_size}, this loader has {g}: a blend's "
                "sample order depends on the global batch size, so it resumes only with the same one"
            )
        delivered = count * saved_batch_size
        if delivered % g:
            raise LoaderError(
                f"loader state was saved after {delivered} samples ({count} batches of {saved_batch_size}); "
                f"resuming with global batch size {g} needs a size that divides {delivered}"
            )
        return delivered // g
