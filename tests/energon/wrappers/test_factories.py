"""energon's named factory classes: what get_dataset_from_config returns, direct construction, refusals."""

from __future__ import annotations

import pytest

import energon_arrow as ea
from energon_arrow.epathlib import EPath
from energon_arrow.loader.errors import LoaderError
from tests.energon.wrappers.conftest import VAL_KEYS, wc
from tests.loader.conftest import write_dataset_yaml


def test_field_map_dataset_is_a_standard_factory(prepared_root):
    factory = ea.get_dataset_from_config(prepared_root, split_part="val", worker_config=wc(), decoder=None)
    assert type(factory) is ea.StandardWebdatasetFactory
    for base in (
        ea.BaseCoreDatasetFactory,
        ea.BaseWebdatasetFactory,
        ea.DefaultGenericWebdatasetFactory,
        ea.DefaultDecoderWebdatasetFactory,
    ):
        assert isinstance(factory, base)
    assert not isinstance(factory, (ea.CrudeWebdataset, ea.CaptioningWebdataset))


def test_class_style_and_crude_yaml_pick_energons_class(dataset_copy):
    write_dataset_yaml(
        dataset_copy,
        "__module__: megatron.energon\n__class__: CaptioningWebdataset\nfield_map: {image: jpg, caption: txt}\n",
    )
    factory = ea.get_dataset_from_config(dataset_copy, split_part="val", worker_config=wc(), decoder=None)
    assert type(factory) is ea.CaptioningWebdataset
    assert isinstance(factory, ea.DefaultDecoderWebdatasetFactory)
    assert not isinstance(factory, ea.StandardWebdatasetFactory)  # as in energon
    assert ea.CaptioningWebdataset.__sample_type__ is ea.CaptioningSample
    write_dataset_yaml(dataset_copy, "__module__: megatron.energon\n__class__: CrudeWebdataset\n")
    crude = ea.get_dataset_from_config(dataset_copy, split_part="val", worker_config=wc())
    assert type(crude) is ea.CrudeWebdataset


def test_direct_construction_with_energons_signature(prepared_root):
    factory = ea.CaptioningWebdataset(
        prepared_root, split_part="val", training=False, worker_config=wc(), decoder=None
    )
    assert len(factory) == 40 and factory.__sample_type__ is ea.CaptioningSample
    assert [s.__key__ for s in ea.get_loader(factory.build())] == VAL_KEYS
    std = ea.StandardWebdatasetFactory(
        prepared_root, split_part="val", training=False, worker_config=wc(), sample_type=ea.CaptioningSample
    )
    assert len(std) == 40
    with pytest.raises(LoaderError, match="holds CaptioningSample samples, not TextSample"):
        ea.StandardWebdatasetFactory(
            prepared_root, split_part="val", training=False, worker_config=wc(), sample_type=ea.TextSample
        )
    with pytest.raises(LoaderError, match="not TextSample"):
        ea.TextWebdataset(prepared_root, split_part="val", training=False, worker_config=wc())
    with pytest.raises(LoaderError, match="prepared as StandardWebdatasetFactory"):
        ea.CrudeWebdataset(prepared_root, split_part="val", training=False, worker_config=wc())
    with pytest.raises(LoaderError, match=r"\['sample_loader'\] are not supported"):
        ea.DefaultDecoderWebdatasetFactory(
            prepared_root, split_part="val", training=False, worker_config=wc(), sample_loader=print
        )
    # energon's direct construction passes a field map: it replaces the prepared one
    text = ea.StandardWebdatasetFactory(
        prepared_root,
        split_part="val",
        training=False,
        worker_config=wc(),
        sample_type=ea.TextSample,
        field_map={"text": "txt"},
        decoder=None,
    )
    assert text.__sample_type__ is ea.TextSample
    first = next(iter(ea.get_loader(text.build())))
    assert isinstance(first, ea.TextSample) and first.text.startswith(b"sample 0 of shard 3")
    with pytest.raises(LoaderError, match="required field"):
        ea.CaptioningWebdataset(
            prepared_root, split_part="val", training=False, worker_config=wc(), field_map={"caption": "txt"}
        )
    with pytest.raises(LoaderError, match="field_map needs sample_type="):
        ea.StandardWebdatasetFactory(
            prepared_root, split_part="val", training=False, worker_config=wc(), field_map={"caption": "txt"}
        )
    with pytest.raises(LoaderError, match="cannot be constructed directly"):
        ea.JoinedWebdatasetFactory(prepared_root, split_part="val", training=False, worker_config=wc())


def test_subclass_overriding_load_sample_is_refused():
    with pytest.raises(LoaderError, match="overriding load_sample is not supported"):

        class Mine(ea.DefaultDecoderWebdatasetFactory):
            def load_sample(self, sample):
                return sample

    class Plain(ea.StandardWebdatasetFactory):  # subclassing without load_sample is fine
        pass

    assert issubclass(Plain, ea.BaseCoreDatasetFactory)


def test_load_dataset_gives_energons_loader_classes(prepared_root, tmp_path):
    plain = ea.load_dataset(prepared_root)
    assert isinstance(plain, ea.DatasetLoaderInterface) and not isinstance(plain, ea.Metadataset)
    assert plain.prepare() == ()
    with pytest.raises(LoaderError, match="not a metadataset"):
        plain.traverse(split_part="train")
    v2 = tmp_path / "v2.yaml"
    v2.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n"
        f"    path: {prepared_root}\n"
    )
    v1 = tmp_path / "v1.yaml"
    v1.write_text(f"splits:\n  train:\n    datasets:\n      - weight: 1\n        path: {prepared_root}\n")
    loader2, loader1 = ea.load_dataset(str(v2)), ea.load_dataset(v1)
    assert type(loader2) is ea.MetadatasetV2 and type(loader1) is ea.Metadataset
    assert isinstance(loader2, ea.DatasetLoaderInterface)
    assert [r.path for r in loader2.traverse(split_part="train")] == [EPath(prepared_root)]
    assert loader2.prepare() == []
    loaded = loader1.get_datasets(training=False, split_part="train", worker_config=wc(), decoder=None)
    assert [type(d.dataset) for d in loaded.datasets] == [ea.StandardWebdatasetFactory]


@pytest.mark.parametrize(
    "yaml",
    [
        None,  # the prepared field-map dataset.yaml
        "__module__: megatron.energon\n__class__: CaptioningWebdataset\nfield_map: {image: jpg, caption: txt}\n",
        "__module__: megatron.energon\n__class__: CrudeWebdataset\n",
    ],
)
def test_same_factory_class_as_energon(energon_prepared_root, tmp_path, yaml):
    import shutil

    me = pytest.importorskip("megatron.energon")
    from megatron.energon.dataset_config import get_dataset_from_config

    root = str(tmp_path / "ds")
    shutil.copytree(energon_prepared_root, root)
    if yaml is not None:
        write_dataset_yaml(root, yaml)
    theirs = get_dataset_from_config(
        root,
        split_part="val",
        training=False,
        worker_config=me.WorkerConfig(rank=0, world_size=1, num_workers=0),
    )
    ours = ea.get_dataset_from_config(root, split_part="val", training=False, worker_config=wc())
    assert type(ours).__name__ == type(theirs).__name__
    assert [c.__name__ for c in type(ours).__mro__ if hasattr(me, c.__name__)] == [
        c.__name__ for c in type(theirs).__mro__ if hasattr(me, c.__name__) and c.__name__ != "Generic"
    ]


def test_user_factory_class_in_dataset_yaml_is_refused(dataset_copy):
    write_dataset_yaml(dataset_copy, "__module__: my_project.data\n__class__: MyFactory\n")
    with pytest.raises(ValueError, match="'MyFactory': user dataset factory classes .* are not supported"):
        ea.get_dataset_from_config(dataset_copy, split_part="val", worker_config=wc())


def test_factory_paths_and_subflavors_are_energons(dataset_copy, tmp_path):
    """`factory.paths` are EPaths and `factory.subflavors` the dataset.yaml's updated with the metadataset's."""
    write_dataset_yaml(
        dataset_copy,
        "sample_type: {__module__: megatron.energon, __class__: CaptioningSample}\n"
        "field_map: {image: jpg, caption: txt}\nsubflavors: {source: dataset.yaml, number: 42}\n",
    )
    mds = tmp_path / "m.yaml"
    mds.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n"
        f"    path: {dataset_copy}\n    subflavors: {{number: 43, mds: outer}}\n"
    )
    (loaded,) = (
        ea.load_dataset(mds)
        .get_datasets(training=False, split_part="train", worker_config=wc(), decoder=None)
        .datasets
    )
    assert loaded.dataset.paths == [EPath(dataset_copy)]
    assert loaded.dataset.subflavors == {"source": "dataset.yaml", "number": 43, "mds": "outer"}
    sample = next(iter(loaded.dataset.build()))
    assert sample.__subflavors__ == loaded.dataset.subflavors
