"""Task encoders with energon 7.4's names, type parameters, hooks and defaults, at the path of energon's
`megatron.energon.task_encoder.base` (whose other names, the batching helpers and `stateless`, are re-exported here).

`TaskEncoder[T_sample, T_encoded_sample, T_raw_batch, T_batch]` is the base class; the loader calls its hooks in
energon's order (see energon/hooks.py):

  crude samples: `cook_crude_sample(sample, cooker, aux)` with the first of `cookers` matching the subflavors
  -> `preencode_sample` (when overridden; then `encode_sample` must not be) or `encode_sample` (when overridden)
  -> with packing_buffer_size: `select_samples_to_pack` per buffer, then per group `postencode_sample` (when
     overridden) on each sample and `pack_selected_samples`; without: `postencode_sample` (when overridden)
  -> grouped by `batch_group_criterion` (when overridden) or in runs of `batch_size` (None: no batching)
  -> `batch(samples)` -> `encode_batch(batch)` (when overridden)

Every hook may raise `SkipSample`; `encode_sample`/`preencode_sample`/`postencode_sample`/`encode_batch` may be
generators yielding any number of outputs. Failures go to `worker_config.global_error_handler` and are tolerated
`get_failure_tolerance(hook, __default_failure_tolerance__)` times in a row (energon's default: 100).
With `packing_buffer_size`, buffers of encoded samples go to `select_samples_to_pack`, the selected samples get
`postencode_sample` and each group `pack_selected_samples` (energon/packing.py), before batching.
"""

from __future__ import annotations

import dataclasses
from abc import ABC
from collections.abc import Callable, Hashable, Sequence
from types import MethodType
from typing import Any, Generic, TypeVar

from energon_arrow.energon.task_pipeline import PipelineBuilders
from energon_arrow.energon.worker_config import WorkerConfig
from energon_arrow.loader.errors import LoaderError
from energon_arrow.loader.filestore_api import PrimaryFileStore
from energon_arrow.samples import Batch, batch_list, batch_pad_stack, batch_stack, get_stateless
from energon_arrow.samples.batch import batch_samples, generic_batch
from energon_arrow.samples.cookers import Cooker
from energon_arrow.samples.decoders import SampleDecoder
from energon_arrow.samples.sample import META_FIELDS, Sample
from energon_arrow.samples.stateless import get_failure_tolerance, stateless

# energon's names of megatron.energon.task_encoder.base that energon_arrow implements
__all__ = [
    "AugmentTaskEncoder",
    "Batch",
    "DefaultTaskEncoder",
    "TaskEncoder",
    "batch_list",
    "batch_pad_stack",
    "batch_stack",
    "generic_batch",
    "get_failure_tolerance",
    "get_stateless",
    "stateless",
]

T_sample = TypeVar("T_sample")
T_encoded_sample = TypeVar("T_encoded_sample")
T_raw_batch = TypeVar("T_raw_batch")
T_batch = TypeVar("T_batch")


def _fields_of(obj: Any) -> dict:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return {f: getattr(obj, f) for f in obj._fields}
    if isinstance(obj, dict):
        return obj
    raise ValueError(
        f"cannot read the fields of a {type(obj).__name__} (not a dataclass, NamedTuple or dict)"
    )


def convert_to(obj: Any, cls: type | None) -> Any:
    """`obj` as an instance of `cls` (a dataclass, NamedTuple or dict), its fields mapped by name; as is when
    `cls` is None or `obj` already is one (energon's DefaultTaskEncoder conversion)."""
    if cls is None or isinstance(obj, cls):
        return obj
    fields = _fields_of(obj)
    if issubclass(cls, dict):
        return fields
    if dataclasses.is_dataclass(cls) or issubclass(cls, tuple):
        return cls(**fields)
    raise ValueError(f"cannot convert to {cls.__name__}: not a dataclass, NamedTuple or dict")


def _batch_value(name: str, values: list, action: Callable | None) -> Any:
    if action is not None:
        return action(values)
    if name == "__restore_key__":
        return tuple(values)
    if name in ("__subflavors__", "__sources__"):
        return values
    return generic_batch(values)


class TaskEncoder(PipelineBuilders, ABC, Generic[T_sample, T_encoded_sample, T_raw_batch, T_batch]):
    """Base class of task encoders: every hook defaults to the identity / default batching (see module doc);
    energon's build_* pipeline methods come from energon/task_pipeline.py."""

    __default_failure_tolerance__: int | None = 100
    cookers: Sequence[Cooker] = ()
    #: how parts are decoded (a SampleDecoder); None keeps every part as raw bytes
    decoder: SampleDecoder | None = SampleDecoder()

    def _is_overridden(self, bound_method: Callable, bases: Sequence[type] | None = None) -> bool:
        """Whether `bound_method` is defined outside `bases` (default: TaskEncoder itself)."""
        if not isinstance(bound_method, MethodType):
            return True
        func = bound_method.__func__
        return not any(getattr(base, func.__name__, None) is func for base in bases or (TaskEncoder,))

    def _encode_hooks(self) -> tuple[Any, Any]:
        """(the pre-batching encode hook or None, postencode_sample or None), as energon picks them (for the
        pipeline builders, task_pipeline.py)."""
        return _encode_fns(self)

    @stateless
    def cook_crude_sample(self, sample: Any, cooker: Cooker, aux: dict) -> T_sample:
        """Turn a crude sample (dict of parts) into a sample with `cooker`; `aux` holds the aux file stores
        (and `primary`) the cook function takes by keyword."""
        if cooker.need_cache and "cache" not in aux:
            aux = {**aux, "cache": self.cache}
        if "primary" in aux:  # '.part' names are parts of this sample, as in energon
            aux = {**aux, "primary": PrimaryFileStore(aux["primary"], current_key=sample["__key__"])}
        return cooker.cook(sample, **aux)

    @stateless
    def encode_sample(self, sample: T_sample) -> T_encoded_sample:
        """Encode one sample; may raise SkipSample or be a generator yielding any number of samples."""
        return sample

    @stateless
    def preencode_sample(self, sample: T_sample) -> T_sample:
        """The part of encoding before packing (define it instead of encode_sample, with postencode_sample)."""
        return sample

    @stateless
    def postencode_sample(self, sample: T_sample) -> T_encoded_sample:
        """The part of encoding after packing (or right after preencode_sample when not packing)."""
        return sample

    @stateless
    def batch(self, samples: list[T_encoded_sample]) -> T_raw_batch:
        """Batch encoded samples (default: a batch of the first sample's type); may raise SkipSample."""
        return self._batch(samples, type(samples[0]))

    def batch_group_criterion(self, sample: T_encoded_sample) -> tuple[Hashable, int | None]:
        """(group key, batch size of that group) of a sample; samples are batched with their own group only.
        The default, (None, None), does not group. A group's batch size must not change."""
        return None, None

    @stateless
    def encode_batch(self, batch: T_raw_batch) -> T_batch:
        """Encode a batch; may raise SkipSample or be a generator yielding any number of batches."""
        return batch

    def _batch(
        self,
        samples: list,
        result_type: type,
        actions: dict[str, Callable[[list], Any]] | None = None,
        default_action: Callable[[list], Any] = generic_batch,
    ) -> Any:
        """Batch `samples` into a `result_type` (dataclass, NamedTuple or dict) field by field: `actions[field]`
        or `default_action` (metadata fields: `__restore_key__` a tuple, `__subflavors__`/`__sources__` lists);
        a dataclass with `from_samples` batches itself."""
        if dataclasses.is_dataclass(result_type) and hasattr(result_type, "from_samples"):
            return result_type.from_samples(samples)
        first = _fields_of(samples[0])
        columns = {k: [_fields_of(s)[k] for s in samples] for k in first}
        actions = actions or {}
        out = {
            k: (
                _batch_value(k, v, actions.get(k))
                if k in META_FIELDS and default_action is generic_batch
                else actions.get(k, default_action)(v)
            )
            for k, v in columns.items()
        }
        if issubclass(result_type, dict):
            return out
        if dataclasses.is_dataclass(result_type) or issubclass(result_type, tuple):
            return result_type(**out)
        raise ValueError(f"cannot batch into {result_type.__name__}: not a dataclass, NamedTuple or dict")

    def select_samples_to_pack(self, samples: list[T_encoded_sample]) -> list[list[T_encoded_sample]]:
        """Packing (with packing_buffer_size): split a full buffer of encoded samples into the groups to pack
        (each a list of samples taken from `samples`; samples in no group are dropped). Define it together with
        pack_selected_samples."""
        raise LoaderError(
            "select_samples_to_pack is not defined: packing needs it (and pack_selected_samples)"
        )

    def pack_selected_samples(self, samples: list[T_encoded_sample]) -> T_encoded_sample:
        """Packing (with packing_buffer_size): pack one group of selected samples (postencode_sample applied)
        into one sample; may be a generator yielding several."""
        raise LoaderError(
            "pack_selected_samples is not defined: packing needs it (and select_samples_to_pack)"
        )

    @property
    def current_batch_index(self) -> int:
        """Index (per rank, from 0) of the batch the sample being encoded will be part of (the batch being
        built, in batch/encode_batch). Only inside the loader's hook calls."""
        return _active().active_worker_batch_index

    @property
    def current_sample_index(self) -> int:
        """Index of the sample being encoded (in encode/cook hooks: its position in this rank's sample stream;
        in batch/encode_batch: the batch's index). Only inside the loader's hook calls."""
        return _active().active_worker_sample_index

    @property
    def cache(self) -> Any:
        """The loader's cache pool (get_loader / get_savable_loader(cache_pool=...)), for cookers' aux reads."""
        from energon_arrow.energon.cache_pool import active_pool

        return active_pool()


def _active() -> WorkerConfig:
    wc = WorkerConfig.active_worker_config
    if wc is None:
        raise LoaderError(
            "current_batch_index / current_sample_index exist only while the loader calls a task-encoder hook"
        )
    return wc


class DefaultTaskEncoder(
    TaskEncoder[T_sample, T_encoded_sample, T_raw_batch, T_batch],
    ABC,
    Generic[T_sample, T_encoded_sample, T_raw_batch, T_batch],
):
    """Identity encoding and default batching, converting to `encoded_sample_type` / `raw_batch_type` /
    `batch_type` (dataclass, NamedTuple or dict; fields mapped by name) where given."""

    def __init__(
        self,
        *,
        encoded_sample_type: type | None = None,
        raw_batch_type: type | None = None,
        batch_type: type | None = None,
    ):
        self._encoded_sample_type = encoded_sample_type
        self._raw_batch_type = raw_batch_type
        self._batch_type = batch_type

    def is_default_encoding(self) -> bool:
        """True when encode_sample / batch / encode_batch (and every other hook) are the defaults and convert
        nothing: the loader then assembles batches column-wise, without per-sample objects."""
        cls = type(self)
        hooks = ("encode_sample", "preencode_sample", "postencode_sample", "batch", "encode_batch")
        return (
            all(getattr(cls, h) is getattr(DefaultTaskEncoder, h) for h in hooks)
            and cls.batch_group_criterion is TaskEncoder.batch_group_criterion
            and getattr(self, "_encoded_sample_type", None) is None
            and getattr(self, "_raw_batch_type", None) is None
            and getattr(self, "_batch_type", None) is None
        )

    @stateless
    def encode_sample(self, sample: T_sample) -> T_encoded_sample:
        return convert_to(sample, getattr(self, "_encoded_sample_type", None))

    @stateless
    def batch(self, samples: list[T_encoded_sample]) -> T_raw_batch:
        raw_type = getattr(self, "_raw_batch_type", None)
        if raw_type is None:
            return batch_samples(samples)
        actions = {"__subflavors__": lambda x: x} if isinstance(samples[0], Sample) else None
        return self._batch(samples, raw_type, actions=actions)

    @stateless
    def encode_batch(self, batch: T_raw_batch) -> T_batch:
        batch_type = getattr(self, "_batch_type", None)
        if batch_type is None or getattr(self, "_raw_batch_type", None) == batch_type:
            return batch
        return convert_to(batch, batch_type)


class AugmentTaskEncoder(
    TaskEncoder[T_sample, T_encoded_sample, T_raw_batch, T_batch],
    Generic[T_sample, T_encoded_sample, T_raw_batch, T_batch],
):
    """Wraps another task encoder; encode_sample / batch / encode_batch and the decoder delegate to it (as in
    energon, nothing else does: override what the augmentation changes)."""

    def __init__(self, task_encoder: TaskEncoder):
        self._task_encoder = task_encoder

    @property
    def decoder(self) -> SampleDecoder | None:
        return self._task_encoder.decoder

    def encode_sample(self, sample: T_sample) -> T_encoded_sample:
        return self._task_encoder.encode_sample(sample)

    def batch(self, samples: list[T_encoded_sample]) -> T_raw_batch:
        return self._task_encoder.batch(samples)

    def encode_batch(self, batch_data: T_raw_batch) -> T_batch:
        return self._task_encoder.encode_batch(batch_data)


def _overridden(te: Any, name: str, bases: tuple = (TaskEncoder,)) -> bool:
    fn = getattr(te, name, None)
    if fn is None:
        return False
    if not isinstance(te, TaskEncoder):
        return True
    return te._is_overridden(fn, bases)


def _encode_fns(te: Any) -> tuple[Any, Any]:
    """(the pre-batching encode hook or None, postencode_sample or None), as energon picks them."""
    if _overridden(te, "preencode_sample"):
        if _overridden(te, "encode_sample", (TaskEncoder, DefaultTaskEncoder)):
            raise LoaderError(
                f"{type(te).__name__} defines both preencode_sample and encode_sample; define either "
                "encode_sample, or preencode_sample (+ postencode_sample)"
            )
        pre = te.preencode_sample
    elif _overridden(te, "encode_sample"):
        pre = te.encode_sample
    else:
        pre = None
    post = te.postencode_sample if _overridden(te, "postencode_sample") else None
    return pre, post
