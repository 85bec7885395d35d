"""The dataset `get_train_dataset` / `get_val_dataset` return: a `BatchDataset` that also knows energon's view of
it (worker config, batch size, `len()`, the val limit, the virtual epoch) and how its loader forms batches.

Batches are one per read chunk (this rank's slice of a global batch) unless the task encoder groups samples,
has generator hooks, packs samples (`packing_buffer_size`), or `batch_size=None`: then the workers return encoded samples and the loader regroups them
(energon/regroup.py, per energon worker: energon/worker_regroup.py), reading chunks of `batch_size` samples per
rank (1 when unbatched).
"""

from __future__ import annotations

from typing import Any

import torch

from energon_arrow.energon.debug_log import worker_batches_logged
from energon_arrow.energon.energon_len import energon_length, worker_slice_offsets
from energon_arrow.energon.factory_config import factory_len
from energon_arrow.energon.restore_sample import tag_chunk_item
from energon_arrow.energon.watchdog import Watchdog
from energon_arrow.energon.worker_config import WorkerConfig
from energon_arrow.energon.worker_send import sendable
from energon_arrow.energon.worker_slices import WorkerIndex, train_schedule, val_schedule
from energon_arrow.loader.dataset import BatchDataset, LoaderSettings
from energon_arrow.loader.errors import LoaderError
from energon_arrow.loader.order import combine_multipliers
from energon_arrow.loader.reader import SampleReader
from energon_arrow.loader.source import SplitSource
from energon_arrow.samples.decoders import PartDecoder


class EnergonDataset(BatchDataset):
    """A BatchDataset with energon's attributes: `worker_config`, `batch_size`, `batch_drop_last`, `limit`
    (val, batches per pass), `virtual_epoch_length` and `len()`."""

    worker_config: WorkerConfig
    batch_size: int | None
    batch_drop_last: bool
    batch_limit: int | None
    virtual_epoch_length: int
    packing_buffer_size: int | None
    mode: str
    energon_len: int
    #: energon's view for config(): per dataset, per worker of the rank, its sequence boundaries; per dataset the
    #: factory's shuffle_over_epochs; the factories' parallel_shard_iters and max_samples_per_sequence
    slice_offsets: list
    factory_over_epochs: list
    parallel_shard_iters: int | None
    max_samples_per_sequence: int | None

    #: (timeout, initial timeout, fail_on_timeout) of the watchdog, set by the loader; timeout None: off
    watchdog: tuple = (None, None, False)
    #: a source has samples excluded one by one: energon's len() counts them, unlike this dataset's passes
    counts_excluded: bool = False
    #: builds energon's savable pipeline with the same arguments (set by energon/energon_api.py); None: none
    pipeline_recipe: Any = None
    _pipeline: Any = None

    def as_pipeline(self):
        """energon's savable pipeline (energon/wrappers/) built with this dataset's arguments, for energon's
        wrappers (BlendDataset, MixBatchDataset, ...) to compose: built once, on first use; unwrapped, this
        dataset keeps its own fast loader."""
        if self._pipeline is None:
            if self.pipeline_recipe is None:
                raise LoaderError(
                    "this dataset cannot be wrapped in energon's wrapper datasets (no pipeline equivalent); build "
                    "it with get_train_dataset / get_val_dataset"
                )
            self._pipeline = self.pipeline_recipe()
        return self._pipeline

    @property
    def dataset(self):
        """The dataset energon's pipeline wraps (`as_pipeline()`'s outermost stage), so that code walking energon's
        `.dataset` chain (down to a BlendDataset, its `dataset_weights` and each sample loader's
        `workers_slice_offsets`) finds the same stages; the batches still come from this dataset's loader."""
        if self.pipeline_recipe is None:
            raise AttributeError("dataset")
        return self.as_pipeline()

    def __iter__(self):
        timeout, initial, fail = self.watchdog
        items = super().__iter__() if self.hooks.stream else self._tagged()
        if self.worker_config.should_log(1 if self.mode == "train" else 2):
            items = worker_batches_logged(items, self.worker_config, self.mode)
        if self.hooks.stream:
            items = self._sent(items)
        if timeout is None:
            return items
        return Watchdog(timeout, initial, fail).watch_iter(items)

    @staticmethod
    def _sent(items):
        """Stream mode: the encoded samples, pickled here when this is a DataLoader worker (energon/worker_send.py)."""
        if torch.utils.data.get_worker_info() is None:
            yield from items
            return
        for b, skipped, samples, leases, snapshots in items:
            yield b, skipped, sendable(samples, b), leases, snapshots

    def _tagged(self):
        """The batches with their restore key prefixed by their chunk (in the worker, off the main process)."""
        for b, skipped, batch, leases, snapshots in super().__iter__():
            yield b, skipped, tag_chunk_item(batch, b), leases, snapshots

    def config(self) -> dict:
        """energon's `config()` of the pipeline it builds for this dataset's call (energon/pipeline_config.py)."""
        from energon_arrow.energon.pipeline_config import dataset_config

        return dataset_config(self)

    def __len__(self) -> int:
        """Batches (samples when unbatched) this rank yields in one pass of a finite dataset (val, or train with
        repeat=False) whenever that is known in advance; otherwise (an endless train dataset, grouped batches,
        generator hooks, packing) energon's len(), computed as energon computes it (packing: as if unpacked). With
        samples excluded one by one (split.yaml), energon's len() counts them too: then that, as energon's."""
        h = self.hooks
        if self.limit is None or h.group_fn is not None or h.generates or h.packing or self.counts_excluded:
            return self.energon_len
        n = self.rank_length()
        return n if self.batch_limit is None else min(n, self.batch_limit)

    def encoded_chunk(self, b: int) -> list:
        """The encoded samples of chunk `b` of this rank (stream mode), read and encoded in this process."""
        caches = self._caches()
        plan = self.plan(b, caches)
        if not len(plan[1]):
            return []
        readers = [SampleReader(src) for src in self.sources]
        try:
            samples, _ = self.assembler.batch(b, plan, self._fetch(plan, readers), 0)
        finally:
            for r in readers:
                r.close()
        return samples or []


def _decoder_of(task_encoder: Any) -> PartDecoder:
    decoder = getattr(task_encoder, "decoder", PartDecoder())
    if decoder is None:
        return PartDecoder(raw=True)
    if not isinstance(decoder, PartDecoder):
        raise LoaderError(
            f"task_encoder.decoder must be an energon_arrow SampleDecoder / PartDecoder or None, got {decoder!r}"
        )
    return decoder


def build_dataset(
    sources: list[SplitSource],
    *,
    mode: str,
    worker_config: WorkerConfig,
    batch_size: int | None,
    batch_drop_last: bool,
    task_encoder: Any,
    settings: dict,
    trust_remote_code: bool,
    sample_type: type | None = None,
    error_handler: Any = None,
    limit: int | None = None,
    virtual_epoch_length: int = 0,
    packing_buffer_size: int | None = None,
    weights: list[float] | None = None,
    repetitions: list[float] | None = None,
    max_samples_per_sequence: int | None = None,
    parallel_shard_iters: int | None = None,
    sample_order: str = "energon",
    source_over_epochs: list | None = None,
) -> EnergonDataset:
    """The EnergonDataset of `sources` (`mode` "train" or "val"; `settings`: the other LoaderSettings; a blend's
    `weights` or a blend_epochized's `repetitions`, one per source; val: `source_over_epochs`, a metadataset's
    shuffle_over_epochs_multiplier per source, which energon's factories hold)."""
    if worker_config is None:
        raise LoaderError(
            "worker_config is required (WorkerConfig(rank=..., world_size=..., num_workers=...))"
        )
    if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
        raise LoaderError(f"batch_size must be a positive integer or None (unbatched), got {batch_size!r}")
    if virtual_epoch_length < 0:
        raise LoaderError(f"virtual_epoch_length must be >= 0, got {virtual_epoch_length}")
    from energon_arrow.energon.hooks import TaskHooks

    probe = TaskHooks(task_encoder)  # which hooks are overridden decides the batching mode
    stream = (
        batch_size is None or probe.group_fn is not None or probe.generates or packing_buffer_size is not None
    )
    chunk = 1 if batch_size is None else batch_size
    ds = EnergonDataset(
        sources,
        LoaderSettings(
            global_batch_size=chunk * worker_config.world_size,
            seed=worker_config.seed_offset,
            drop_last=batch_drop_last and not stream,
            **settings,
        ),
        rank=worker_config.rank,
        world_size=worker_config.world_size,
        weights=weights,
        repetitions=repetitions,
        decoder=_decoder_of(task_encoder),
        hooks=TaskHooks(task_encoder, worker_config.seed_offset, chunk),
        trust_remote_code=trust_remote_code,
    )
    if sample_type is not None:
        for src, builder in zip(sources, ds.builders):
            if not issubclass(builder.sample_cls, sample_type):
                raise LoaderError(
                    f"{src.name}: samples are {builder.sample_cls.__name__}, not a subclass of sample_type="
                    f"{sample_type.__name__}"
                )
    ds.hooks.stream = stream
    ds.hooks.packing = packing_buffer_size is not None
    ds.packing_buffer_size = packing_buffer_size
    ds.hooks.worker_config = worker_config
    if error_handler is not None:
        ds.hooks.worker_config = _with_handler(worker_config, error_handler)
    if limit is not None and limit > 0 and not stream and ds.limit is not None:
        ds.limit = min(ds.limit, limit * ds.settings.global_batch_size)  # `limit` chunks = `limit` batches
    ds.worker_config, ds.mode = worker_config, mode
    ds.batch_size, ds.batch_drop_last = batch_size, batch_drop_last
    ds.batch_limit = limit if limit is not None and limit > 0 else None
    # energon's index space of each dataset: its rows plus the samples split.yaml excludes one by one, which
    # energon slices, shuffles and counts in len() like the others and skips as it reads them (`gaps`)
    sizes = [s.energon_len() for s in sources]
    gaps = [s.excluded if s.has_excluded() else None for s in sources]
    # energon's order: len() is energon's, which counts them (sample_order="global": the batches of a pass)
    ds.counts_excluded = any(g is not None for g in gaps) and (sample_order == "energon" or mode == "val")
    # energon rotates the workers over the datasets by their factories' lengths: the split's shards, whole
    rotation = [factory_len(s) for s in sources]
    # what energon's pipeline for this call holds (its config(), energon/pipeline_config.py): per dataset, per
    # worker, its sequence boundaries; the factories' shuffle_over_epochs, parallel_shard_iters and
    # max_samples_per_sequence (val: energon's factories get the metadataset's multipliers only)
    ds.slice_offsets = worker_slice_offsets(
        sizes,
        [s.energon_shard_bounds() for s in sources],
        worker_config.rank,
        worker_config.world_size,
        worker_config.num_workers,
        max_samples_per_sequence,
        rotation,
    )
    ds.factory_over_epochs = (
        list(ds.over_epochs)
        if mode == "train"
        else [combine_multipliers(1, m) for m in (source_over_epochs or [1] * len(sources))]
    )
    ds.parallel_shard_iters, ds.max_samples_per_sequence = parallel_shard_iters, max_samples_per_sequence
    if mode == "val":  # energon's order: per-worker slices, batched per worker (energon/worker_slices.py)
        ds.schedule = val_schedule(
            sizes,
            chunk,
            worker_config.rank,
            worker_config.world_size,
            worker_config.num_workers,
            drop_last=ds.settings.drop_last,
            limit=None if stream else ds.batch_limit,
            rotation_sizes=rotation,
            gaps=gaps,
        )
    elif sample_order == "energon":  # energon's training order, per worker (energon/train_order.py)
        ds.schedule = train_schedule(
            sizes,
            ds.slice_offsets,
            chunk,
            worker_config,
            parallel_shard_iters=parallel_shard_iters,
            over_epochs=ds.over_epochs if ds.settings.shuffle else [None] * len(sources),
            weights=weights,
            repetitions=repetitions,
            repeat=ds.settings.repeat,
            shuffle_buffer=ds.settings.shuffle_buffer,
            drop_last=ds.settings.drop_last,
            gaps=gaps,
            factory_sizes=rotation,
        )
    if sample_order == "energon" or mode == "val":
        ds.settings.slice_workers = max(1, worker_config.num_workers)
        ds.hooks.worker_index = WorkerIndex(ds.schedule, worker_config)
        if stream and probe.group_fn is None and packing_buffer_size is None:
            ds.hooks.per_batch = chunk  # a sample's outputs are numbered by the batch they go to
    ds.virtual_epoch_length = virtual_epoch_length
    ds.energon_len = energon_length(
        sizes,
        rank=worker_config.rank,
        world_size=worker_config.world_size,
        num_workers=worker_config.num_workers,
        batch_size=batch_size,
        drop_last=batch_drop_last,
        grouped=probe.group_fn is not None,
        repetitions=repetitions,
        virtual_epoch_length=virtual_epoch_length,
        limit=ds.batch_limit,
        rotation_sizes=rotation,
    )
    return ds


def _with_handler(worker_config: WorkerConfig, handler) -> WorkerConfig:
    """A copy of `worker_config` whose global_error_handler is `handler`."""
    import copy

    wc = copy.copy(worker_config)
    wc.global_error_handler = handler
    return wc
