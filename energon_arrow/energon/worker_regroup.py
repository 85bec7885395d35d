"""Regrouping per energon worker: energon packs, batches and encodes batches inside each of a rank's workers, on
that worker's own stream of samples, and its loader then takes the workers' outputs in turn.

`WorkerRegroupers` keeps one Regrouper (energon/regroup.py) per energon worker of the rank, with energon's batch
numbering and each worker's share of a val `limit` (energon's LimitDataset), feeds each chunk to the regrouper of
the worker whose stream it comes from (`schedule.worker_of`) and yields their outputs round robin: worker `turn`
next; when its regrouper has nothing ready the loader reads more chunks (the other workers' outputs wait); a worker
with nothing left this pass (or at its limit) drops out of the turn, as torch's DataLoader skips finished workers.
Without energon's worker order (`sample_order="global"`) there is one regrouper: the batches then do not depend on
the worker count.

State: `{"workers": [each regrouper's state], "turn": the worker that yields next}`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from energon_arrow.energon.hooks import TaskHooks
from energon_arrow.energon.regroup import Regrouper
from energon_arrow.energon.worker_slices import limit_share
from energon_arrow.loader.errors import LoaderError


class WorkerRegroupers:
    def __init__(
        self,
        hooks: TaskHooks,
        schedule: Any,
        batch_size: int | None,
        drop_last: bool,
        limit: int | None = None,
        packing_buffer_size: int | None = None,
    ):
        """`schedule`: the dataset's; its workers when the hooks number as energon (`hooks.worker_index`)."""
        workers = schedule.workers if hooks.worker_index is not None else 1
        self.worker_of: Callable[[int], int] = schedule.worker_of if workers > 1 else lambda chunk: 0
        self.parts = [
            Regrouper(
                hooks, batch_size, drop_last, limit_share(limit, w, workers), packing_buffer_size, w, workers
            )
            for w in range(workers)
        ]
        self.turn = 0

    @property
    def packer(self):
        """A packer of the task encoder's (they all pack alike), for restore_sample."""
        return self.parts[0].packer

    @property
    def unbatched(self) -> bool:
        return self.parts[0].unbatched

    def reset(self) -> None:
        """Start a new pass."""
        for part in self.parts:
            part.reset()
        self.turn = 0

    def feed(self, chunk: int, samples: list) -> None:
        """Add the encoded samples of `chunk` to its worker's regrouper."""
        self.parts[self.worker_of(chunk)].feed(chunk, samples)

    def finish(self) -> None:
        """End of a finite pass: every worker's stream ends."""
        for part in self.parts:
            part.finish()

    @property
    def done(self) -> bool:
        """This pass is over for every worker (Regrouper.done)."""
        return all(part.done for part in self.parts)

    @property
    def at_limit(self) -> bool:
        return all(part.at_limit for part in self.parts)

    def fed(self) -> dict[int, int]:
        """Per worker: the encoded samples fed this pass (TaskHooks.fed)."""
        return {w: part.received for w, part in enumerate(self.parts)}

    def drain(self) -> Iterator[tuple[Any, list]]:
        """(output, the queue entry it comes from) for the outputs ready in turn; stops at a worker that has
        none ready yet."""
        n = len(self.parts)
        while True:
            for _ in range(n):
                part = self.parts[self.turn]
                got = part.take()
                if got is not None:
                    break
                if not part.done:
                    return
                self.turn = (self.turn + 1) % n
            else:
                return
            self.turn = (self.turn + 1) % n
            yield got

    # ---- state -------------------------------------------------------------------------------------------
    def state(self) -> dict:
        return {"workers": [part.state() for part in self.parts], "turn": self.turn}

    def restore(self, state: dict, encoded_chunk: Callable[[int, int], list]) -> None:
        """Rebuild every worker's regrouper (`encoded_chunk` as Regrouper.restore's)."""
        saved = state.get("workers") if isinstance(state, dict) else None
        if not isinstance(saved, list) or len(saved) != len(self.parts):
            raise LoaderError(
                f"loader state holds the regrouping of {len(saved) if isinstance(saved, list) else 'no'} "
                f"workers, this loader regroups {len(self.parts)} (saved with other workers, or by an older "
                "energon-arrow)"
            )
        for part, part_state in zip(self.parts, saved):
            part.restore(part_state, encoded_chunk)
        self.turn = int(state["turn"]) % len(self.parts)
