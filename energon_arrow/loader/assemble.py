"""Assemble one batch from the fetched sample bytes.

Two paths that give identical batches:
- columnar (the hot path): for a typed field-map dataset and a task encoder that does not customise samples,
  every field is sliced for the whole batch at once from the per-part offset arrays of the index; raw payloads
  become `bytes` straight from the fetched buffer, torch-mode images are decoded straight into the batch tensor
  (images/batch.py, in a recycled shared-memory slot), other decoded ones go through the part decoder; no
  per-sample object is created;
- per sample: anything else (crude samples + cookers, sample_loader.py, custom encode_sample, json access, or a
  sample that failed on the columnar path so that it is skipped or reported precisely).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from energon_arrow.images.batch import image_column
from energon_arrow.images.jpeg_bytes import pack_images
from energon_arrow.images.slots import SlotAllocator
from energon_arrow.loader.batch_columns import BatchColumns, SourceColumns
from energon_arrow.loader.builder import SampleBuilder
from energon_arrow.loader.errors import (
    DecodeError,
    ErrorBudgetExceeded,
    JoinerError,
    LoaderError,
    MissingPartError,
)
from energon_arrow.loader.members import split_sample
from energon_arrow.loader.sample_hooks import position_seeds
from energon_arrow.loader.source import SplitSource
from energon_arrow.loader.spans import Spans
from energon_arrow.samples.batch import generic_batch
from energon_arrow.samples.decoders import ImageDecode


class _Fallback(Exception):
    """The columnar path cannot take this batch; build it sample by sample."""


def sample_parts(src: SplitSource, row: int, view: memoryview) -> tuple[str, dict[str, memoryview]]:
    """(key, {part: payload view}) of one fetched sample, from the index's part layout or the tar headers."""
    if src.parts is not None and src.keys is not None:
        parts = {}
        for name, (off, size) in src.parts.items():
            o = int(off[row])
            if o >= 0:
                parts[name] = view[o : o + int(size[row])]
        return src.keys[row].as_py(), parts
    shard = src.shard_paths[src.shard_id[row]]
    where = f"{src.storage.url_of(shard)}@{int(src.byte_offset[row])}"
    key, parts = split_sample(view, where)
    if key is None:
        raise LoaderError(f"{where}: no sample member at this byte offset (stale index?)")
    return key, parts


def located_samples(
    columns: SourceColumns, rows: np.ndarray, views
) -> list[tuple[str, dict, str, int]] | None:
    """(key, {part: payload view}, shard, sample index in the shard) of each of `rows` (fetched as `views`) of the
    source of `columns`, each index column gathered once for all of them, where `sample_parts` and the per-row
    lookups map every row through the split's row map column by column (~140 us per sample on the loader
    benchmark's data, ~25% of that here). None when the source has no part layout in its index (its members are
    split from the tar headers: `sample_parts`)."""
    src = columns.src
    if src.parts is None or src.keys is None:
        return None
    cols = columns.batch(rows)
    keys = cols.keys()
    paths = src.shard_paths
    shards = [paths[s] for s in cols.shard.tolist()]
    indices = cols.sample_index().tolist()
    columns = [(name, *(a.tolist() for a in cols.part(name))) for name in src.parts]
    out = []
    for j, view in enumerate(views):
        parts = {}
        for name, offs, sizes in columns:
            o = offs[j]
            if o >= 0:
                parts[name] = view[o : o + sizes[j]]
        out.append((keys[j], parts, shards[j], indices[j]))
    return out


def columnar_batch(
    builder: SampleBuilder,
    src: SplitSource,
    cols: BatchColumns,
    views: list,
    seeds: list[int],
    slots: SlotAllocator,
    device_normalize: bool = False,
) -> Any:
    """The whole batch of one typed source without per-sample objects; raises _Fallback when it cannot."""
    fm = builder.field_map
    if fm is None or src.parts is None or src.keys is None:
        raise _Fallback
    fields: dict[str, list] = {}
    cache: dict[str, list] = {}
    for name, refs in fm.fields.items():
        if len(refs) != 1 or refs[0].path or refs[0].part not in src.parts:
            raise _Fallback
        ref = refs[0]
        if ref.part not in cache:
            offs, sizes = cols.part(ref.part)
            if (offs < 0).any():
                raise _Fallback
            fn = builder.decoder.handler(ref.part)
            try:
                if isinstance(fn, ImageDecode) and fn.spec.kind == "torch":
                    payloads = [v[o : o + s] for v, o, s in zip(views, offs.tolist(), sizes.tolist())]
                    if slots.board is not None and slots.board.device_decode:  # decoded by the main process
                        fields[name] = pack_images(payloads, slots, name, ref.part)
                    else:
                        fields[name] = image_column(payloads, fn, seeds, slots, name, device_normalize)
                    continue
                if fn is None and isinstance(views, Spans):
                    cache[ref.part] = views.payloads(offs, sizes)
                elif fn is None:
                    cache[ref.part] = [
                        bytes(v[o : o + s]) for v, o, s in zip(views, offs.tolist(), sizes.tolist())
                    ]
                else:
                    cache[ref.part] = [
                        fn(v[o : o + s]) for v, o, s in zip(views, offs.tolist(), sizes.tolist())
                    ]
            except Exception:
                raise _Fallback from None
        if name not in fields:
            fields[name] = generic_batch(cache[ref.part])
    keys = cols.keys()
    paths = src.shard_paths
    shards = [paths[s] for s in cols.shard.tolist()]
    restore = tuple(("Webdataset", p, i) for p, i in zip(shards, cols.sample_index().tolist()))
    subflavors = [dict(builder.subflavors) for _ in range(len(keys))]
    # every sample here has all field-map parts (else _Fallback above); energon's sources list those members
    parts = [p for p in src.parts if p in fm.parts]
    sources = builder.sources(keys, parts, shards, cols.rows.tolist())
    return builder.sample_cls(
        __key__=keys, __restore_key__=restore, __subflavors__=subflavors, __sources__=sources, **fields
    )


def _failed_sample(src: SplitSource, row: int, exc: Exception) -> dict:
    """What the error handler is given for a sample that did not load (energon gives the raw sample)."""
    shard = src.shard_paths[src.shard_id[row]]
    return {"__key__": getattr(exc, "key", None), "__shard__": shard, "__index__": int(src.sample_index[row])}


class Assembler:
    """Builds batches for a BatchDataset: columnar when possible, per sample otherwise (with skip/budget)."""

    def __init__(self, sources, builders, hooks, settings):
        self.sources, self.builders, self.hooks, self.settings = sources, builders, hooks, settings
        self.columnar = hooks.is_default and all(b.field_map is not None for b in builders)
        self._columns: dict[int, SourceColumns] = {}  # per source, made on first use
        self.slots = SlotAllocator(None, 0)  # the worker's slots (dataset.py sets them per worker)
        self.device_normalize = False

    def batch(
        self, b: int, plan: tuple[np.ndarray, np.ndarray], views: list, skipped: int
    ) -> tuple[Any, int]:
        """(batch or None when every sample was skipped, skipped count so far)."""
        owner, rows = plan
        seeds = position_seeds(self.settings.seed, b, len(rows))
        if self.columnar and not self.hooks.stream and (owner == owner[0]).all():
            d = int(owner[0])
            try:
                cols = self.columns(d).batch(rows)
                batch = columnar_batch(
                    self.builders[d], self.sources[d], cols, views, seeds, self.slots, self.device_normalize
                )
                self.hooks.loaded()
                return batch, skipped
            except _Fallback:
                self.slots.rollback()
        for d in np.unique(owner).tolist():  # builders that read more than the sample (joined members)
            prefetch = getattr(self.builders[d], "prefetch_batch", None)
            if prefetch is not None:
                prefetch(rows[owner == d])
        samples = []
        located = self._located(owner, rows, views)
        for slot, (d, row, view, seed) in enumerate(zip(owner.tolist(), rows.tolist(), views, seeds)):
            src = self.sources[d]
            try:
                if located[slot] is not None:
                    key, parts, shard, index = located[slot]
                else:
                    key, parts = sample_parts(src, row, view)
                    shard, index = src.shard_paths[src.shard_id[row]], int(src.sample_index[row])
                sample = self.builders[d].build(key, parts, shard, index, row, seed)
                self.hooks.loaded()
                samples.extend(self.hooks.sample(sample, b, slot, src))
            except (DecodeError, MissingPartError, JoinerError) as exc:
                if self.settings.skip_errors is None:  # energon's: the error handler, the sample skipped
                    self.hooks.load_failed(exc, _failed_sample(src, row, exc))
                    skipped += 1
                    continue
                if not self.settings.skip_errors:
                    raise
                skipped += 1
                if skipped > self.settings.error_budget:
                    raise ErrorBudgetExceeded(
                        f"{skipped} samples skipped, over the error budget of {self.settings.error_budget}; "
                        f"last: {exc}"
                    ) from exc
        return (self.hooks.batch(samples, b) if samples else None), skipped

    def columns(self, d: int) -> SourceColumns:
        if d not in self._columns:
            self._columns[d] = SourceColumns(self.sources[d])
        return self._columns[d]

    def _located(self, owner: np.ndarray, rows: np.ndarray, views) -> list:
        """`located_samples` of each position of the batch; None where its source has no part layout."""
        out: list = [None] * len(rows)
        ds = np.unique(owner).tolist()
        for d in ds:
            if len(ds) == 1:
                idx, mine = list(range(len(rows))), views
            else:
                idx = np.flatnonzero(owner == d).tolist()
                mine = [views[i] for i in idx]
            found = located_samples(self.columns(d), rows[idx], mine)
            for i, one in zip(idx, found or ()):
                out[i] = one
        return out
