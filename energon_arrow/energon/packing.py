"""Sample packing with energon 7.4's semantics (its PackingDataset), run by the loader's main process.

The encoded samples (preencode_sample / encode_sample applied, postencode_sample not yet) of one stream (a
worker's, in energon's order: each Regrouper of energon/worker_regroup.py has its Packer) are cut into
consecutive windows of `packing_buffer_size` samples. Each full window goes to
`select_samples_to_pack(samples) -> [[sample, ...], ...]`; samples not selected are dropped, as in energon. Each
selected group then gets `postencode_sample` on each of its samples (a failing or skipped sample leaves the
group) and `pack_selected_samples(group)` (a generator may yield several packs). At the end of a finite pass the
partial window is selected and packed too. The packs go on to batching (energon/regroup.py).

Errors follow energon: a failing `select_samples_to_pack` drops the window (error handler, failure tolerance in a
row), `SkipSample` drops the window or pack; when more than the select hook's failure tolerance windows in a row
give no group, a FatalSampleError is raised (energon's "did not yield any packs" error).

State: a pack is referred to by its group's sample refs `[chunk, index]` and its output index, so restoring
re-encodes those chunks and re-packs the group (no sample data in the state); the partial window is its refs.
Randomness of `@stateless(restore_seeds=True)` hooks is seeded from the first sample ref of the window / group.
"""

from __future__ import annotations

import inspect
from typing import Any

from energon_arrow.loader.errors import FatalSampleError, LoaderError
from energon_arrow.samples.stateless import get_failure_tolerance

Ref = tuple[int, int]
#: a pack's ref: (refs of the samples it packs, index among the outputs of pack_selected_samples)
PackRef = tuple[tuple[Ref, ...], int]

_SELECT, _PACK, _POST = 0x5E1EC7, 0x9ACC, 0x9057


def check_packing(task_encoder: Any, packing_buffer_size: Any, function: str) -> None:
    """Refuse a packing configuration energon refuses (with a clear message)."""
    if packing_buffer_size is None:
        return
    if (
        isinstance(packing_buffer_size, bool)
        or not isinstance(packing_buffer_size, int)
        or packing_buffer_size < 1
    ):
        raise LoaderError(
            f"{function}: packing_buffer_size must be a positive integer, got {packing_buffer_size!r}"
        )
    from energon_arrow.energon.task_encoder.base import _overridden

    missing = [
        h for h in ("select_samples_to_pack", "pack_selected_samples") if not _overridden(task_encoder, h)
    ]
    if missing:
        raise LoaderError(
            f"{function}: packing_buffer_size={packing_buffer_size} needs the task encoder to define both "
            f"select_samples_to_pack and pack_selected_samples; {type(task_encoder).__name__} lacks {missing}"
        )
    post = getattr(task_encoder, "postencode_sample", None)
    if _overridden(task_encoder, "postencode_sample") and inspect.isgeneratorfunction(post):
        raise LoaderError(
            f"{function}: with packing, {type(task_encoder).__name__}.postencode_sample must return one sample "
            "(energon does not support a generator there)"
        )


class Packer:
    """The packing window of one stream (see the module docstring)."""

    def __init__(self, hooks: Any, buffer_size: int):
        self.hooks, self.buffer_size = hooks, int(buffer_size)
        te = hooks.te
        self.select_fn, self.pack_fn = te.select_samples_to_pack, te.pack_selected_samples
        self.tolerance = get_failure_tolerance(
            self.select_fn, getattr(te, "__default_failure_tolerance__", None)
        )
        self.reset()

    def reset(self) -> None:
        self.refs: list[Ref] = []
        self.samples: list = []
        self.empty_rounds = 0  # windows in a row that gave no group

    def add(self, ref: Ref, sample: Any, b: int) -> list[tuple[PackRef, Any]]:
        """Put one encoded sample in the window; the packs made when the window is full (else [])."""
        self.refs.append(ref)
        self.samples.append(sample)
        return self._select(b) if len(self.samples) >= self.buffer_size else []

    def flush(self, b: int) -> list[tuple[PackRef, Any]]:
        """End of a finite pass: the packs of the partial window."""
        return self._select(b) if self.samples else []

    def _select(self, b: int) -> list[tuple[PackRef, Any]]:
        refs, samples = self.refs, self.samples
        self.refs, self.samples = [], []
        ref_of = {id(s): r for s, r in zip(samples, refs)}
        seed = self.hooks.sample_seed(*refs[0]) ^ _SELECT
        out = self.hooks._call("select_samples_to_pack", self.select_fn, list(samples), seed, (b, b))
        groups = out if inspect.isgeneratorfunction(self.select_fn) else (out[0] if out else [])
        packs: list[tuple[PackRef, Any]] = []
        nonempty = 0
        for group in groups or ():
            group = list(group)
            if not group:
                continue
            nonempty += 1
            missing = [g for g in group if id(g) not in ref_of]
            if missing:
                raise LoaderError(
                    f"select_samples_to_pack returned a sample that is not one of the buffer's samples "
                    f"({type(missing[0]).__name__}); it must select (not copy or change) the samples it is given"
                )
            group_refs = tuple(ref_of[id(g)] for g in group)
            packs.extend(((group_refs, k), p) for k, p in enumerate(self.pack(group_refs, group, b)))
        if nonempty:
            self.empty_rounds = 0
        else:
            self.empty_rounds += 1
            if self.tolerance > 0 and self.empty_rounds > self.tolerance:
                raise FatalSampleError(
                    f"select_samples_to_pack did not select any pack in {self.empty_rounds} buffers in a row "
                    f"(failure_tolerance={self.tolerance}). Likely your code or dataset are broken."
                )
        return packs

    def pack(self, refs: tuple[Ref, ...], group: list, b: int) -> list:
        """postencode_sample on each sample of a group (when defined), then the outputs of pack_selected_samples."""
        h = self.hooks
        if h.post is not None:
            group = [
                out
                for r, s in zip(refs, group)
                for out in h._call("postencode_sample", h.post, s, h.sample_seed(*r) ^ _POST, (b, b))
            ]
        seed = h.sample_seed(*refs[0]) ^ _PACK
        return h._call("pack_selected_samples", self.pack_fn, group, seed, (b, b))

    # ---- state -------------------------------------------------------------------------------------------
    def state(self) -> dict:
        return {"window": [list(r) for r in self.refs], "empty_rounds": self.empty_rounds}

    def restore(self, state: dict, samples_of) -> None:
        self.reset()
        self.refs = [tuple(r) for r in state["window"]]
        self.samples = samples_of(self.refs)
        self.empty_rounds = int(state["empty_rounds"])
