"""energon's named dataset factory classes (`StandardWebdatasetFactory`, `CaptioningWebdataset`, `CrudeWebdataset`,
`JoinedWebdatasetFactory`, `CrudeJsonlDatasetFactory`, ...), all over our `WebdatasetFactory`.

`get_dataset_from_config` / `load_dataset` return an instance of the class energon would build for the
dataset.yaml (`factory_class`), so `isinstance` checks keep their meaning. The classes can also be constructed
directly with energon's keyword signature (`Cls(path, split_part=, training=, worker_config=, ...)`): a
`field_map` (with one of energon's sample types) replaces the prepared dataset.yaml's, as in energon; callables
(`sample_loader`, `part_filter`), `subset` and `handler` are refused, as are subclasses that override
`load_sample` (samples are built by our vectorised builder, not per-sample methods).
"""

from __future__ import annotations

import os
from typing import Any, Generic

from energon_arrow.energon.wrappers.factory_base import BaseCoreDatasetFactory, T_sample
from energon_arrow.energon.wrappers.webdataset_factory import _DEFAULT_DECODER, WebdatasetFactory, _options
from energon_arrow.loader.errors import LoaderError

__all__ = ["BaseCoreDatasetFactory", "factory_class"]

# energon arguments refused in direct construction: callables and decode options the prepared dataset.yaml fixes
_REFUSED = ("sample_loader", "part_filter", "subset", "handler", "image_decode", "av_decode")


class BaseWebdatasetFactory(WebdatasetFactory, Generic[T_sample]):
    """energon's base of the WebDataset factories, with energon's constructor:
    `Cls(path, *, split_part, training, worker_config, shuffle_over_epochs=1, parallel_shard_iters=None,
    max_samples_per_sequence=None, split_config=None, subflavors=None, decoder=SampleDecoder(),
    dataset_config="dataset.yaml", storage_options=None, trust_remote_code=False)`."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "load_sample" in cls.__dict__:
            raise LoaderError(
                f"{cls.__qualname__}: overriding load_sample is not supported by energon-arrow (samples are "
                "built from the prepared dataset.yaml by a vectorised builder); use a sample_loader in the "
                "dataset.yaml or a TaskEncoder.encode_sample / cooker instead"
            )

    @classmethod
    def prepare_dataset(cls, parent_path: Any, paths: list[str], **kwargs) -> set[str]:
        """energon's programmatic prepare (same keywords; index/prepare_api.py): index `paths` under
        `parent_path`, write `.nv-meta`, return the part types found."""
        from energon_arrow.index.prepare_api import prepare_dataset

        return prepare_dataset(parent_path, paths, **kwargs)

    def __init__(
        self,
        path: Any,
        *,
        split_part: str,
        training: bool,
        worker_config,
        split_config: str | None = None,
        dataset_config: str | None = None,
        subflavors: dict | None = None,
        storage_options: dict | None = None,
        decoder: Any = _DEFAULT_DECODER,
        **kwargs,
    ):
        from energon_arrow.loader.source import open_split

        refused = sorted(k for k in kwargs if k in _REFUSED)
        if refused:
            raise LoaderError(
                f"{type(self).__name__}: argument(s) {refused} are not supported; the prepared dataset.yaml "
                "fixes how samples are built (re-prepare the dataset to change them)"
            )
        sample_type = kwargs.pop("sample_type", None) or type(self).__dict__.get("__sample_type__")
        field_map = kwargs.pop("field_map", None)
        options = _options(decoder=decoder, **kwargs)
        path = os.fspath(path) if isinstance(path, os.PathLike) else path
        source = open_split(
            path,
            split_part,
            storage_options,
            subflavors,
            dataset_yaml=dataset_config or "dataset.yaml",
            split_config=split_config or "split.yaml",
        )
        if field_map is not None:  # energon's direct construction: the field map replaces the dataset.yaml's
            source.config = _field_map_config(type(self), sample_type, field_map, source.config)
        crude = issubclass(type(self), CrudeWebdataset)
        if crude != bool(source.config.crude):
            raise LoaderError(
                f"{type(self).__name__}: {source.name} is prepared as {factory_class(source).__name__} "
                "(see its dataset.yaml)"
            )
        super().__init__(
            source,
            training=training,
            worker_config=worker_config,
            decoder=options["decoder"],
            max_samples_per_sequence=options["max_samples_per_sequence"],
            trust_remote_code=options["trust_remote_code"],
        )
        if sample_type is not None and not issubclass(self.__sample_type__, sample_type):
            raise LoaderError(
                f"{type(self).__name__}: {source.name} holds {self.__sample_type__.__name__} samples, "
                f"not {sample_type.__name__}"
            )


def _field_map_config(cls: type, sample_type: type | None, field_map: dict, prepared):
    """The dataset config of `field_map` for one of energon's sample types (checked like a dataset.yaml)."""
    import energon_arrow.samples as samples
    from energon_arrow.meta import MetaError
    from energon_arrow.meta.dataset_yaml import check_field_map, field_map_dataset

    name = getattr(sample_type, "__name__", "")
    if sample_type is None or getattr(samples, name, None) is not sample_type:
        raise LoaderError(
            f"{cls.__name__}: field_map needs sample_type= one of energon's sample types (energon_arrow.samples), "
            f"got {sample_type!r}; for other types prepare the dataset with a sample_loader"
        )
    try:
        check_field_map(name, field_map)
        config = field_map_dataset(name, field_map)
    except MetaError as exc:
        raise LoaderError(f"{cls.__name__}: {exc}") from None
    config.subflavors = prepared.subflavors
    return config


class DefaultGenericWebdatasetFactory(BaseWebdatasetFactory[T_sample]):
    """energon's factory for samples described by a dataset.yaml (field map or sample loader)."""


class DefaultDecoderWebdatasetFactory(DefaultGenericWebdatasetFactory[T_sample]):
    """energon's generic factory plus part decoding (images, video, audio, containers)."""


class StandardWebdatasetFactory(DefaultDecoderWebdatasetFactory[T_sample]):
    """energon's factory for a `sample_type` + `field_map` / `sample_loader` dataset.yaml (the default)."""


class CrudeWebdataset(DefaultDecoderWebdatasetFactory):
    """energon's factory of crude samples (part dicts handed to a TaskEncoder's cookers)."""


class JoinedWebdatasetFactory(WebdatasetFactory, Generic[T_sample]):
    """energon's factory of a metadataset `join:` (one sample from each joined dataset per key); what
    `load_dataset(<metadataset with join>).get_datasets(...)` returns for a joined leaf."""

    def __init__(self, *args, **kwargs):
        raise LoaderError(
            "JoinedWebdatasetFactory(...) cannot be constructed directly in energon-arrow; declare the join in a "
            "metadataset (`join:` with `joiner:`) and use load_dataset(path).get_datasets(...)"
        )


class CrudeJsonlDatasetFactory(BaseCoreDatasetFactory):
    """energon's base of the crude JSONL factory (a metadataset leaf `path: x.jsonl`)."""

    @classmethod
    def prepare_dataset(cls, path: Any, *, storage_options: dict | None = None) -> int:
        """energon's programmatic prepare of a `.jsonl` file: writes its `.jsonl.idx` (byte-identical to
        energon's, index/jsonl_index.py) and returns the number of samples. `path`: a local path, URL or EPath
        (an `energon_arrow.epathlib.EPath`'s own storage options apply unless `storage_options` is given)."""
        from energon_arrow.index.jsonl_index import prepare_jsonl

        options = storage_options or getattr(path, "storage_options", None) or None
        return prepare_jsonl(path, options)


class DefaultCrudeJsonlDatasetFactory(WebdatasetFactory, CrudeJsonlDatasetFactory):
    """energon's crude JSONL factory: each line is a crude sample `{"json": <line>}` for the cookers.
    `DefaultCrudeJsonlDatasetFactory(path, *, training, worker_config, max_samples_per_sequence=None,
    subflavors=None, storage_options=None)`; the `.jsonl.idx` must exist (energon-arrow prepare)."""

    def __init__(
        self,
        path: Any,
        *,
        training: bool,
        worker_config,
        subflavors: dict | None = None,
        storage_options: dict | None = None,
        **kwargs,
    ):
        from energon_arrow.loader.jsonl_source import open_jsonl

        refused = sorted(k for k in kwargs if k in _REFUSED)
        if refused:
            raise LoaderError(f"DefaultCrudeJsonlDatasetFactory: argument(s) {refused} are not supported")
        options = _options(**kwargs)
        path = os.fspath(path) if isinstance(path, os.PathLike) else str(path)
        super().__init__(
            open_jsonl(path, storage_options, subflavors),
            training=training,
            worker_config=worker_config,
            decoder=options["decoder"],
            max_samples_per_sequence=options["max_samples_per_sequence"],
        )
        if subflavors is None:
            self.subflavors = None  # energon's JSONL factory: samples' __subflavors__ stay None unless given


def _per_type(name: str) -> type:
    import energon_arrow.samples as samples

    sample = getattr(samples, f"{name}Sample")
    return type(
        f"{name}Webdataset",
        (DefaultDecoderWebdatasetFactory,),
        {
            "__doc__": f"energon's (deprecated) factory fixed to {name}Sample.",
            "__sample_type__": sample,
            "__module__": __name__,
        },
    )


_TYPE_NAMES = (
    "Captioning", "Image", "ImageClassification", "Interleaved", "MultiChoiceVQA", "OCR",
    "SimilarityInterleaved", "Text", "VidQA", "VQA", "VQAOCR",
)  # fmt: skip
PER_TYPE = {f"{n}Webdataset": _per_type(n) for n in _TYPE_NAMES}
globals().update(PER_TYPE)

NAMED = {
    cls.__name__: cls
    for cls in (
        BaseCoreDatasetFactory,
        BaseWebdatasetFactory,
        DefaultGenericWebdatasetFactory,
        DefaultDecoderWebdatasetFactory,
        StandardWebdatasetFactory,
        CrudeWebdataset,
        JoinedWebdatasetFactory,
        CrudeJsonlDatasetFactory,
        DefaultCrudeJsonlDatasetFactory,
        *PER_TYPE.values(),
    )
}


def factory_class(source) -> type:
    """The energon factory class for a split: by its builder (joined, JSONL), else its dataset.yaml."""
    from energon_arrow.loader.joined_source import JoinedBuilder
    from energon_arrow.loader.jsonl_source import JsonlBuilder

    if source.builder is JsonlBuilder:
        return DefaultCrudeJsonlDatasetFactory
    builder = getattr(source.builder, "func", source.builder)  # joined sources carry a functools.partial
    if builder is JoinedBuilder:
        return JoinedWebdatasetFactory
    config = source.config
    if config.crude:
        return CrudeWebdataset
    if config.dataset_class is not None:
        return NAMED[config.dataset_class]
    return StandardWebdatasetFactory
