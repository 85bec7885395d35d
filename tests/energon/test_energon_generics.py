"""energon's generic classes subscript as in energon 7.4.1 (`Lazy[str]` in a sample's annotations,
`DefaultTaskEncoder[A, B, C, D]` as a base class, `SavableDataset[T]`, ...), and the subscripted forms still work:
instances, subclasses, dataclass fields, pickling."""

from __future__ import annotations

import pickle
import types
import typing

import pytest

import energon_arrow as ea
from energon_arrow.energon.cache_pool import NoCachePool
from energon_arrow.energon.wrappers import factories

# class -> number of type parameters (energon 7.4.1's declarations)
GENERIC_ARITY = {
    ea.Lazy: 1,
    ea.DirectLazy: 1,
    ea.MockLazy: 1,
    ea.FileCacheLazy: 1,
    ea.FileStore: 1,
    ea.PrimaryFileStore: 1,
    ea.TaskEncoder: 4,
    ea.DefaultTaskEncoder: 4,
    ea.AugmentTaskEncoder: 4,
    ea.Cooker: 1,
    ea.SavableDataLoader: 1,
    ea.SavableDataset: 1,
    ea.MapDataset: 2,
    ea.IterMapDataset: 2,
    ea.BatchDataset: 2,
    ea.GroupBatchDataset: 2,
    ea.MixBatchDataset: 2,
    ea.PackingDataset: 3,
    ea.BlendDataset: 1,
    ea.ConcatDataset: 1,
    ea.FilterDataset: 1,
    ea.LimitDataset: 1,
    ea.RepeatDataset: 1,
    ea.EpochizeDataset: 1,
    ea.ShuffleBufferDataset: 1,
    ea.GcDataset: 1,
    ea.LogSampleDataset: 1,
    ea.BaseCoreDatasetFactory: 1,
    ea.BaseWebdatasetFactory: 1,
    ea.DefaultGenericWebdatasetFactory: 1,
    ea.DefaultDecoderWebdatasetFactory: 1,
    ea.StandardWebdatasetFactory: 1,
    ea.JoinedWebdatasetFactory: 1,
}
# energon fixes their sample type (`CrudeWebdataset(DefaultDecoderWebdatasetFactory[CrudeSample])`): not generic
NOT_GENERIC = (ea.CrudeWebdataset, ea.CaptioningWebdataset, ea.CrudeJsonlDatasetFactory, ea.DecodeFileStore)


@pytest.mark.parametrize("cls", list(GENERIC_ARITY), ids=lambda c: c.__name__)
def test_generic_classes_subscript_with_energons_arity(cls):
    n = GENERIC_ARITY[cls]
    args = (int, str, bytes, float)[:n]
    alias = cls[args if n > 1 else args[0]]
    assert typing.get_origin(alias) is cls and typing.get_args(alias) == args
    assert (
        len(cls.__parameters__) == n
    )  # (torch's datasets subscript through collections.abc: no arity check)
    sub = types.new_class(f"User{cls.__name__}", (alias,))  # a user class deriving from the subscripted form
    assert issubclass(sub, cls)


@pytest.mark.parametrize("cls", NOT_GENERIC, ids=lambda c: c.__name__)
def test_classes_with_a_fixed_type_are_not_subscriptable(cls):
    with pytest.raises(TypeError):
        cls[int]


def test_factory_per_type_classes_stay_subclasses_of_the_generic_bases():
    assert issubclass(factories.CaptioningWebdataset, ea.DefaultDecoderWebdatasetFactory)
    assert issubclass(ea.CrudeWebdataset, ea.BaseCoreDatasetFactory)


@ea.edataclass
class _LazySample(ea.Sample):
    next_txt: ea.Lazy[str]


def _upper(name: str) -> str:
    return name.upper()


def test_lazy_annotated_sample_field_holds_a_working_lazy():
    lazy = ea.MockLazy[str]("abc", _upper)
    sample = _LazySample(__key__="k", __restore_key__=(), __subflavors__={}, next_txt=lazy)
    assert sample.next_txt.get() == "ABC"
    assert typing.get_type_hints(_LazySample)["next_txt"] == ea.Lazy[str]


def test_subscripted_generic_instances_pickle():
    lazy = pickle.loads(pickle.dumps(ea.MockLazy[str]("abc", _upper)))
    assert type(lazy) is ea.MockLazy and lazy.get() == "ABC"
    memory = pickle.loads(pickle.dumps(NoCachePool().to_cache({"a": 1}, "name")))
    assert memory.get() == {"a": 1}
