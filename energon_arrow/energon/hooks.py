"""The task-encoder hooks the loader calls, in energon 7.4's order and with its error contract.

Per sample (in the workers): cook_crude_sample (crude samples) -> preencode_sample or encode_sample (whichever is
overridden) -> postencode_sample (when overridden and not packing; with packing it runs on the selected samples,
energon/packing.py). Per batch: batch -> encode_batch (when overridden). Hooks may
be generators (all outputs are kept, in order) and may raise SkipSample (the sample or batch is dropped).

A sample that does not load (a part that does not decode, a field-map part it lacks) goes to the handler too and
is skipped, fatal after 100 in a row (energon's MapDataset over load_sample), unless the dataset was made with
`skip_errors=False` (raise) or `True` (skip and count against `error_budget`).

Errors, as energon's ErrorContext: any other exception of a hook goes to `worker_config.global_error_handler`
(exception, sample, sources) and the sample / batch is skipped; after `get_failure_tolerance(hook,
task_encoder.__default_failure_tolerance__)` failures of that hook in a row (0: never) a FatalSampleError is
raised; system exceptions (ImportError, MemoryError, NameError, ...) are fatal at once.

Functions marked `@stateless(restore_seeds=True)` are called with `random`, numpy and torch seeded from (loader
seed, batch, slot) and the caller's random state restored afterwards, so a resumed run reproduces their
randomness. While a hook runs, `WorkerConfig.active_worker_config` is set and `current_batch_index` /
`current_sample_index` give the batch's index on this rank and the sample's position in the rank's stream; in
energon's order, as energon numbers them: the worker's k-th batch / sample is k * workers + worker, and when batches
are formed from a stream of outputs (generator hooks, unbatched), each output sees the batch it goes to
(`per_batch`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import random
from types import MethodType
from typing import Any

import numpy as np
import torch

from energon_arrow.energon.task_encoder.base import AugmentTaskEncoder, _encode_fns, _overridden
from energon_arrow.energon.worker_config import WorkerConfig
from energon_arrow.loader.errors import LoaderError
from energon_arrow.loader.filestore_api import PrimaryFileStore, decoded_stores
from energon_arrow.loader.sample_hooks import (
    BATCH_STRIDE,
    LOAD_FAILURE_TOLERANCE,
    SEED_STRIDE,
    ErrorCounter,
)
from energon_arrow.loader.source import SplitSource
from energon_arrow.samples.batch import batch_samples
from energon_arrow.samples.cookers import (
    cook_keywords,
    get_cooker_need_cache,
    get_cooker_need_primary,
    select_cooker,
)
from energon_arrow.samples.errors import SkipSample
from energon_arrow.samples.stateless import get_failure_tolerance


def cook_kwargs(cook, source: SplitSource, cache_pool: Any = None, view: Any = None) -> dict:
    """The aux stores (and `primary`, and the loader's `cache` pool for need_cache) a cook function asks for by
    keyword; `view(source)` gives the source's stores as cookers see them (decoding, see `decoded_stores`)."""
    takes_all, params = cook_keywords(cook)
    wants_primary = "primary" in params or get_cooker_need_primary(cook)
    if wants_primary and "primary" not in source.aux:
        from energon_arrow.loader.filestore import PartStore

        source.aux["primary"] = PartStore(source.storage)
    stores = source.aux if view is None else view(source)
    kwargs = {k: v for k, v in stores.items() if k != "primary" and (takes_all or k in params)}
    if get_cooker_need_cache(cook):
        if cache_pool is None:
            raise LoaderError(
                f"{source.name}: cooker {getattr(cook, '__qualname__', cook)!r} has need_cache=True: pass "
                "cache_pool=FileStoreCachePool(...) or NoCachePool() to get_loader / get_savable_loader"
            )
        kwargs["cache"] = cache_pool
    if wants_primary:
        kwargs["primary"] = stores["primary"]
    return kwargs


@contextlib.contextmanager
def _seeded(seed, enabled: bool):
    """Seed random / numpy / torch from `seed` (an int, or a function giving it: computed only when enabled) for
    the call, then put the caller's random state back."""
    if not enabled:
        yield
        return
    if callable(seed):
        seed = seed()
    saved = random.getstate(), np.random.get_state(), torch.random.get_rng_state()
    random.seed(seed)
    np.random.seed(seed & 0xFFFFFFFF)
    torch.manual_seed(seed)
    try:
        yield
    finally:
        random.setstate(saved[0])
        np.random.set_state(saved[1])
        torch.random.set_rng_state(saved[2])


def _energon_sample_seed(worker_seed: int, sample_index: int) -> int:
    """The seed energon gives a stateless hook with restore_seeds for a worker's sample."""
    return int.from_bytes(hashlib.sha1(f"{worker_seed}|{sample_index}".encode()).digest()[:4], "big")


def _outputs(result: Any, index_at) -> list:
    """A hook's result as a list of outputs (a generator gives all it yields, its k-th output made while the
    hooks see the indices `index_at(k)`)."""
    if not inspect.isgenerator(result):
        return [result]
    out: list = []
    while True:
        WorkerConfig.index_override = index_at(len(out))
        try:
            out.append(next(result))
        except StopIteration:
            return out


class TaskHooks:
    """Calls a task encoder's hooks for the loader (see the module docstring); the core's `SampleHooks`
    (loader/sample_hooks.py), handed to `BatchDataset(hooks=...)` by energon_dataset.py."""

    def __init__(self, task_encoder: Any = None, seed: int = 0, local_batch_size: int = 1):
        self.te = task_encoder
        self.seed, self.local_batch_size = int(seed), int(local_batch_size)
        self.worker_config = WorkerConfig(rank=0, world_size=1, num_workers=0)
        self.cache_pool = None  # the loader's cache pool (cookers with need_cache, TaskEncoder.cache)
        self.cookers = list(getattr(task_encoder, "cookers", ()) or ())
        self.stream = (
            False  # True: workers return the encoded samples; batches are formed by energon/regroup.py
        )
        self.batched = True  # False: batch_size=None, samples are yielded one by one
        self.packing = False  # True: postencode_sample runs after packing selection (energon/packing.py)
        #: energon's per-worker order (energon/worker_slices.py): (b, slot) -> (worker, worker seed, the worker's
        #: batch index, its sample index); per-sample hooks are then seeded and numbered as energon does
        self.worker_index = None
        #: outputs per batch (1: unbatched) when a sample's outputs take the batch index of the batch they go to,
        #: counted from the outputs of its worker's stream so far (energon order, batches neither grouped nor
        #: packed: a generator's outputs may go to several batches); None: the batch index of the chunk
        self.per_batch: int | None = None
        #: per energon worker: the outputs its stream gave so far in this pass (set by the loader before its
        #: workers start; each DataLoader worker reads one energon worker's chunks, in order)
        self.fed: dict[int, int] = {}
        #: while restoring samples of a known batch: the batch index every hook sees (energon's restore)
        self.batch_override: int | None = None
        te = task_encoder
        self.is_default = te is None or bool(getattr(te, "is_default_encoding", lambda: False)())
        self.pre = self.post = self.encode_batch_fn = None
        self.group_fn = None
        if te is not None:
            self.pre, self.post = _encode_fns(te)
            if _overridden(te, "encode_batch"):
                self.encode_batch_fn = te.encode_batch
            if _overridden(te, "batch_group_criterion"):
                self.group_fn = te.batch_group_criterion
                if inspect.isgeneratorfunction(te.batch):
                    raise LoaderError(
                        f"{type(te).__name__}.batch is a generator, which batch_group_criterion does not support"
                    )
        default_tolerance = getattr(te, "__default_failure_tolerance__", None)
        self._counters: dict[str, ErrorCounter] = {}
        # loading a sample (decoding its parts, the field map): energon's MapDataset over load_sample, whose
        # failure tolerance is 100 whatever the task encoder's default
        self._load = ErrorCounter("load_sample", LOAD_FAILURE_TOLERANCE)
        self._aux_views: dict[tuple[int, int], dict] = {}
        self.restoring = False  # True while hooks re-make samples to restore them (see `restoring_samples`)
        self._tolerance = lambda fn: get_failure_tolerance(fn, default_tolerance)

    def load_failed(self, exc: Exception, sample: Any) -> None:
        """A sample did not load (a part that does not decode, a field-map part it lacks): to the error handler,
        as energon does; FatalSampleError after LOAD_FAILURE_TOLERANCE failures in a row."""
        wc = self.worker_config
        self._load.failed(
            exc, sample, wc.restore_error_handler if self.restoring else wc.global_error_handler
        )

    def loaded(self) -> None:
        """Samples loaded: the run of load failures is over."""
        self._load.in_a_row = 0

    @contextlib.contextmanager
    def restoring_samples(self, batch: int | None = None):
        """Hooks re-run to restore samples (`restore_sample`, the waiting samples of a saved state): their
        failures go to `worker_config.restore_error_handler` (default: re-raise), as in energon; with `per_batch`
        numbering, the samples of batch `batch` see that batch index."""
        saved = self.restoring, self.batch_override
        self.restoring = True
        if batch is not None and self.per_batch is not None:
            self.batch_override = batch
        try:
            yield
        finally:
            self.restoring, self.batch_override = saved

    def _stores(self, source: SplitSource) -> dict:
        """`source`'s aux stores (and primary) decoding with the task encoder's decoder, made once per source."""
        key = (id(source), len(source.aux))  # primary is added to source.aux on first use
        views = self._aux_views.get(key)
        if views is None:
            views = self._aux_views[key] = decoded_stores(source.aux, getattr(self.te, "decoder", None))
        return views

    @property
    def generates(self) -> bool:
        """Whether a hook may turn one sample (or batch) into several: then batches need regrouping."""
        fns = (self.pre, self.post, getattr(self.te, "batch", None), self.encode_batch_fn)
        return any(f is not None and inspect.isgeneratorfunction(f) for f in fns)

    # ---- calling one hook --------------------------------------------------------------------------------
    def _call(self, name: str, fn, arg: Any, seed, index, restore: Any = None, **kwargs) -> list:
        """The outputs of `fn(arg)`; [] when it skipped or failed (failures counted as energon does). `index`:
        the (batch index, sample index) the hook sees, or a function of the output number giving them."""
        counter = self._counters.get(name)
        if counter is None:
            counter = self._counters[name] = ErrorCounter(name, self._tolerance(_marked(fn)))
        index_at = index if callable(index) else lambda k: index
        outer = WorkerConfig.active_worker_config, WorkerConfig.index_override, WorkerConfig._cache_pool
        WorkerConfig.active_worker_config = self.worker_config
        WorkerConfig.index_override = index_at(0)
        WorkerConfig._cache_pool = self.cache_pool
        try:
            with _seeded(seed, getattr(_marked(restore or fn), "__restore_seeds__", False)):
                out = _outputs(fn(arg, **kwargs), index_at)
        except SkipSample:
            return []
        except LoaderError:
            raise  # a configuration error of ours, not a bad sample
        except Exception as exc:
            wc = self.worker_config
            counter.failed(exc, arg, wc.restore_error_handler if self.restoring else wc.global_error_handler)
            return []
        finally:
            WorkerConfig.active_worker_config, WorkerConfig.index_override, WorkerConfig._cache_pool = outer
        counter.in_a_row = 0
        return out

    def sample_seed(self, b: int, slot: int) -> int:
        return self.seed * SEED_STRIDE + b * BATCH_STRIDE + slot

    # ---- per sample --------------------------------------------------------------------------------------
    def sample(self, sample: Any, b: int, slot: int, source: SplitSource) -> list:
        """The encoded samples made from `sample`, the `slot`-th sample of this rank's slice of batch `b`."""
        te = self.te
        if te is None:
            if isinstance(sample, dict):
                raise LoaderError(f"{source.name}: CrudeWebdataset needs a task encoder with cookers")
            return [sample]
        if self.worker_index is not None:  # energon: seeded from (worker seed, the worker's sample index)
            w, worker_seed, batch_index, sample_index = self.worker_index(b, slot)
            seed = functools.partial(_energon_sample_seed, worker_seed, sample_index)
        else:
            w, seed, batch_index = 0, self.sample_seed(b, slot), b
            sample_index = b * self.local_batch_size + slot
        index = self._output_index(w, batch_index, sample_index)
        samples = [sample]
        if isinstance(sample, dict):
            if not self.cookers:
                raise LoaderError(
                    f"{source.name}: CrudeWebdataset found, but the task encoder has no cookers"
                )
            cooker = select_cooker(
                self.cookers, sample.get("__subflavors__"), f"{source.name} {sample['__key__']!r}"
            )
            aux = cook_kwargs(cooker.cook, source, self.cache_pool, self._stores)
            cook = getattr(te, "cook_crude_sample", None)
            if cook is None:
                if "primary" in aux:
                    aux["primary"] = PrimaryFileStore(aux["primary"], current_key=sample["__key__"])
                samples = self._call("cook", cooker.cook, sample, seed, index, **aux)
            else:
                samples = self._call(
                    "cook_crude_sample",
                    cook,
                    sample,
                    seed,
                    index,
                    restore=cooker.cook,
                    cooker=cooker,
                    aux=aux,
                )
        post = None if self.packing else self.post
        for name, fn in (("encode_sample", self.pre), ("postencode_sample", post)):
            if fn is not None:
                outs: list = []
                for s in samples:
                    outs += self._call(name, fn, s, seed, lambda k, o=len(outs): index(o + k))
                samples = outs
        if self.per_batch is not None and self.batch_override is None:
            self.fed[w] = self.fed.get(w, 0) + len(samples)
        return samples

    def _output_index(self, w: int, batch_index: int, sample_index: int):
        """k -> the (batch index, sample index) the hooks see while making a sample's k-th output: with
        `per_batch`, the batch that output goes to (energon: the batch its worker forms when it is pulled)."""
        if self.batch_override is not None:
            fixed = (self.batch_override, sample_index)
            return lambda k: fixed
        if self.per_batch is None:
            return lambda k: (batch_index, sample_index)
        n = self.worker_index.workers if self.worker_index is not None else 1
        base, per = self.fed.get(w, 0), self.per_batch
        return lambda k: ((base + k) // per * n + w, sample_index)

    # ---- per batch ---------------------------------------------------------------------------------------
    def batch(self, samples: list, b: int = 0) -> Any:
        """Non-stream mode: the batch of `samples` (batch index b), or None when it was skipped."""
        if self.stream:
            return samples
        out = self.batches(samples, b)
        return out[0] if out else None

    def batches(self, samples: list, b: int) -> list:
        """The outputs of batch + encode_batch for `samples`, the b-th batch of this rank ([] when skipped)."""
        if self.te is None:
            return [batch_samples(samples)]
        seed = self.sample_seed(b, 0) ^ 0x5EED
        out = self._call("batch", self.te.batch, samples, seed, (b, b))
        if self.encode_batch_fn is not None:
            out = [r for o in out for r in self._call("encode_batch", self.encode_batch_fn, o, seed, (b, b))]
        return out

    def group_of(self, sample: Any, b: int) -> list:
        """[(group key, batch size)] of a sample, [] when batch_group_criterion skipped / failed on it."""
        return self._call("batch_group_criterion", self.group_fn, sample, 0, (b, b))


def _marked(fn):
    """The function whose @stateless marks apply to `fn`: for AugmentTaskEncoder's own delegating methods, the
    wrapped task encoder's method (energon's seeding wrapper sits on the wrapped method)."""
    while isinstance(fn, MethodType) and isinstance(fn.__self__, AugmentTaskEncoder):
        if getattr(AugmentTaskEncoder, fn.__name__, None) is not fn.__func__:
            break
        fn = getattr(fn.__self__._task_encoder, fn.__name__)
    return fn
