"""energon 7.4's pipeline-building methods of `TaskEncoder`, composing our wrapper datasets (energon/wrappers/).

energon builds every loader this way; energon-arrow's get_train_dataset / get_val_dataset build the fast core
instead (energon/energon_dataset.py) and use these methods only when a task encoder overrides
`build_train_datasets` / `build_val_datasets` (then its pipeline is returned and served by the pipeline loader).
Users may also call them to compose pipelines of their own, with energon's signatures:

- `build_cook_crude_sample(dataset, *, worker_config, subflavors, get_primary_aux, aux=None)`: MapDataset of
  `cook_crude_sample` with the cooker matching `subflavors`;
- `build_encode_sample(dataset, *, worker_config)`: MapDataset of `preencode_sample` or `encode_sample` (whichever
  is overridden; none: the dataset itself);
- `build_batch(dataset, *, batch_size, batch_drop_last=False, packing_buffer_size=None, worker_config)`:
  PackingDataset (packing_buffer_size set: select_samples_to_pack, postencode_sample, pack_selected_samples) or
  `postencode_sample`, then GroupBatchDataset (with `batch_group_criterion`) or BatchDataset (batch_size not None)
  of `batch`, then `encode_batch` (when overridden);
- `build_train_datasets(*, datasets, worker_config, batch_size, batch_drop_last=False, packing_buffer_size=None,
  virtual_epoch_length=0, shuffle_buffer_size=None, blend_mode=NONE, repeat=True)` and
  `build_val_datasets(*, datasets, worker_config, batch_size, batch_drop_last=False, packing_buffer_size=None,
  limit=None)`: energon's recipes over `load_dataset(path).get_datasets(...).datasets`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from energon_arrow.loader.errors import LoaderError
from energon_arrow.loader.filestore_api import decoded_stores
from energon_arrow.samples.cookers import cook_keywords, select_cooker
from energon_arrow.samples.stateless import get_failure_tolerance, get_stateless


def _rotation_offsets(datasets: list, worker_config) -> list[int]:
    """energon's per-dataset worker rotation: the cumulative length before each dataset, modulo all workers."""
    workers = max(1, int(worker_config.num_workers)) * int(worker_config.world_size)
    offsets, total = [], 0
    for d in datasets:
        offsets.append(total % workers)
        total += len(d.dataset)
    return offsets


class PipelineBuilders:
    """Mixed into TaskEncoder (energon/task_encoder/base.py): see the module docstring."""

    def _tolerance(self, fn: Callable) -> int:
        return get_failure_tolerance(fn, self.__default_failure_tolerance__)

    def _map(self, dataset, fn: Callable, worker_config, **kw):
        from energon_arrow.energon.wrappers.map import MapDataset

        return MapDataset(
            dataset,
            fn,
            worker_config=worker_config,
            stateless_map_fn=get_stateless(fn),
            failure_tolerance=self._tolerance(fn),
            **kw,
        )

    def build_cook_crude_sample(
        self,
        dataset,
        *,
        worker_config,
        subflavors: dict,
        get_primary_aux: Callable[[], Any],
        aux: dict | None = None,
    ):
        """Cook the crude samples of `dataset` with the first of `cookers` matching `subflavors`."""
        if not self.cookers:
            raise LoaderError("CrudeWebdataset found, but the task encoder has no cookers")
        cooker = select_cooker(self.cookers, subflavors, f"subflavors {subflavors!r}")
        takes_all, params = cook_keywords(cooker.cook)  # as the fast path: the aux the cook function names
        aux = {k: v for k, v in (aux or {}).items() if takes_all or k in params}
        if (cooker.need_primary or "primary" in params) and "primary" not in aux:
            aux["primary"] = get_primary_aux()
        aux = decoded_stores(aux, self.decoder)
        cook = functools.partial(self.cook_crude_sample, cooker=cooker, aux=aux)
        from energon_arrow.energon.wrappers.map import MapDataset

        return MapDataset(
            dataset,
            cook,
            worker_config=worker_config,
            stateless_map_fn=get_stateless(self.cook_crude_sample),
            map_fn_config={"cooker": {"cook": repr(cooker.cook), "aux": sorted(aux)}},
            failure_tolerance=self._tolerance(self.cook_crude_sample),
        )

    def _load_dataset(self, dataset, worker_rotation_offset: int, worker_config):
        """The core dataset of a LoadedDataset (cooked when crude)."""
        from energon_arrow.samples.types import CrudeSample

        factory = dataset.dataset
        core = factory.build(worker_rotation_offset=worker_rotation_offset)
        if factory.__sample_type__ is CrudeSample:
            return self.build_cook_crude_sample(
                core,
                worker_config=worker_config,
                subflavors=factory.subflavors,
                get_primary_aux=factory.as_file_store,
                aux=dataset.aux,
            )
        if dataset.aux:
            raise LoaderError(f"{factory}: aux is only supported for crude datasets (as in energon)")
        return core

    def build_encode_sample(self, dataset, *, worker_config):
        """Map `preencode_sample` or `encode_sample` (whichever is overridden) over `dataset`."""
        pre, _ = self._encode_hooks()
        return dataset if pre is None else self._map(dataset, pre, worker_config)

    def build_batch(
        self,
        dataset,
        *,
        batch_size: int | None,
        batch_drop_last: bool = False,
        packing_buffer_size: int | None = None,
        worker_config,
    ):
        """Packing (select_samples_to_pack, postencode_sample on the selected samples, pack_selected_samples) or
        postencode_sample, then grouping / batching with `batch`, then encode_batch (as energon composes them)."""
        from energon_arrow.energon.wrappers.batch import BatchDataset, GroupBatchDataset
        from energon_arrow.energon.wrappers.packing import PackingDataset

        post = self.postencode_sample if self._is_overridden(self.postencode_sample) else None
        if packing_buffer_size is not None:
            if not (
                self._is_overridden(self.select_samples_to_pack)
                and self._is_overridden(self.pack_selected_samples)
            ):
                raise LoaderError(
                    "build_batch: packing_buffer_size needs both select_samples_to_pack and pack_selected_samples "
                    "in the task encoder"
                )
            dataset = PackingDataset(
                dataset,
                buffer_size=packing_buffer_size,
                pre_packer=self.select_samples_to_pack,
                final_packer=self.pack_selected_samples,
                final_packer_stateless=get_stateless(self.pack_selected_samples),
                sample_encoder=post,
                sample_encoder_stateless=True if post is None else get_stateless(post),
                pre_packer_failure_tolerance=self._tolerance(self.select_samples_to_pack),
                final_packer_failure_tolerance=self._tolerance(self.pack_selected_samples),
                sample_encoder_failure_tolerance=0 if post is None else self._tolerance(post),
                worker_config=worker_config,
            )
        elif post is not None:
            dataset = self._map(dataset, post, worker_config)
        batched = False
        if self._is_overridden(self.batch_group_criterion):
            dataset = GroupBatchDataset(
                dataset,
                fixed_batch_size=batch_size,
                sample_group_key=self.batch_group_criterion,
                batcher=self.batch,
                batcher_stateless=get_stateless(self.batch),
                drop_last=batch_drop_last,
                failure_tolerance=self._tolerance(self.batch),
                worker_config=worker_config,
            )
            batched = True
        elif batch_size is not None:
            dataset = BatchDataset(
                dataset,
                batch_size=batch_size,
                batcher=self.batch,
                batcher_stateless=get_stateless(self.batch),
                drop_last=batch_drop_last,
                failure_tolerance=self._tolerance(self.batch),
                worker_config=worker_config,
            )
            batched = True
        if batched and self._is_overridden(self.encode_batch):
            dataset = self._map(dataset, self.encode_batch, worker_config)
        return dataset

    def build_train_datasets(
        self,
        *,
        datasets: list,
        worker_config,
        batch_size: int | None,
        batch_drop_last: bool = False,
        packing_buffer_size: int | None = None,
        virtual_epoch_length: int = 0,
        shuffle_buffer_size: int | None = None,
        blend_mode: Any = None,
        repeat: bool = True,
    ):
        """energon's training recipe: (repeated / blended) core datasets -> shuffle buffer -> encode -> batch ->
        EpochizeDataset (virtual_epoch_length > 0) -> LogSampleDataset (worker_log_level >= 1)."""
        from energon_arrow.energon.wrappers.blend import BlendDataset
        from energon_arrow.energon.wrappers.config import DatasetBlendMode
        from energon_arrow.energon.wrappers.epochs import EpochizeDataset, RepeatDataset, ShuffleBufferDataset
        from energon_arrow.energon.wrappers.map import LogSampleDataset

        if not datasets:
            raise LoaderError("build_train_datasets: no datasets given")
        mode = DatasetBlendMode.NONE if blend_mode is None else blend_mode
        loaded = [
            self._load_dataset(d, off, worker_config)
            for d, off in zip(datasets, _rotation_offsets(datasets, worker_config))
        ]
        if mode == DatasetBlendMode.DATASET_WEIGHT:
            if not repeat:
                raise LoaderError("build_train_datasets: a weighted blend needs repeat=True (as in energon)")
            inner = [
                (RepeatDataset(ds, worker_config=worker_config), 1.0 if d.weight is None else float(d.weight))
                for ds, d in zip(loaded, datasets)
            ]
            repeat = False
        elif mode == DatasetBlendMode.SAMPLE_REPETITIONS or not repeat:
            inner = [
                (
                    ds
                    if d.repetitions in (None, 1)
                    else RepeatDataset(ds, repeats=d.repetitions, worker_config=worker_config),
                    len(d.dataset) * (1 if d.repetitions is None else d.repetitions),
                )
                for ds, d in zip(loaded, datasets)
            ]
        else:
            inner = [(RepeatDataset(ds, worker_config=worker_config), 1.0) for ds in loaded]
            repeat = False
        dataset = inner[0][0] if len(inner) == 1 else BlendDataset(*inner, worker_config=worker_config)
        if repeat:
            dataset = RepeatDataset(dataset, worker_config=worker_config)
        if shuffle_buffer_size is not None and shuffle_buffer_size > 1:
            dataset = ShuffleBufferDataset(dataset, size=shuffle_buffer_size, worker_config=worker_config)
        dataset = self.build_encode_sample(dataset, worker_config=worker_config)
        dataset = self.build_batch(
            dataset,
            batch_size=batch_size,
            batch_drop_last=batch_drop_last,
            packing_buffer_size=packing_buffer_size,
            worker_config=worker_config,
        )
        if virtual_epoch_length > 0:
            dataset = EpochizeDataset(dataset, length=virtual_epoch_length, worker_config=worker_config)
        if worker_config.should_log(1):
            dataset = LogSampleDataset(dataset, mode="train", worker_config=worker_config)
        return dataset

    def build_val_datasets(
        self,
        *,
        datasets: list,
        worker_config,
        batch_size: int | None,
        batch_drop_last: bool = False,
        packing_buffer_size: int | None = None,
        limit: int | None = None,
    ):
        """energon's validation recipe: concatenated core datasets -> encode -> batch -> LimitDataset (limit, reset
        every epoch) -> LogSampleDataset (worker_log_level >= 2)."""
        from energon_arrow.energon.wrappers.blend import ConcatDataset
        from energon_arrow.energon.wrappers.epochs import LimitDataset
        from energon_arrow.energon.wrappers.map import LogSampleDataset

        if not datasets:
            raise LoaderError("build_val_datasets: no datasets given")
        loaded = [
            self._load_dataset(d, off, worker_config)
            for d, off in zip(datasets, _rotation_offsets(datasets, worker_config))
        ]
        dataset = loaded[0] if len(loaded) == 1 else ConcatDataset(*loaded, worker_config=worker_config)
        dataset = self.build_encode_sample(dataset, worker_config=worker_config)
        dataset = self.build_batch(
            dataset,
            batch_size=batch_size,
            batch_drop_last=batch_drop_last,
            packing_buffer_size=packing_buffer_size,
            worker_config=worker_config,
        )
        if limit is not None and limit > 0:
            dataset = LimitDataset(dataset, limit, reset_after_epoch=True, worker_config=worker_config)
        if worker_config.should_log(2):
            dataset = LogSampleDataset(dataset, mode="val", worker_config=worker_config)
        return dataset
