"""energon's description of a dataset factory and of the core dataset it builds, for `loader.config()`.

energon's `factory.build()` is `MapDataset(WebdatasetSampleLoaderDataset, factory._load_sample_raw,
map_fn_config=factory.config)`: the sample loader stage describes the worker slices it reads, the map stage the
factory (its class, paths, the split's shards, excludes, shuffle settings, subflavors, sample loader, decoder).
`core_config` gives that pair for one of our sources, with the values energon's factory would hold for the same
call (energon/pipeline_config.py puts it in the pipeline); the names follow docs/migration.md (loader.config()).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from energon_arrow.energon.wrappers.factories import factory_class
from energon_arrow.loader.source import SplitSource

_WDS = "megatron.energon.flavors.webdataset"
#: energon's sample-loading function of each factory kind (`_load_sample_raw`; a join's `load_sample`) and its default
#: sample loader
LOAD_SAMPLE_RAW = f"{_WDS}.base_webdataset.BaseWebdatasetFactory._load_sample_raw"
JSONL_LOAD_SAMPLE_RAW = (
    "megatron.energon.flavors.jsonl.crude_jsonl_dataset.CrudeJsonlDatasetFactory._load_sample_raw"
)
JOINED_LOAD_SAMPLE = f"{_WDS}.joined_webdataset.JoinedWebdatasetFactory.load_sample"
SAMPLE_LOADER = (
    f"{_WDS}.default_generic_webdataset.DefaultGenericWebdatasetFactory.__init__.<locals>.<lambda>"
)


def factory_len(source: SplitSource) -> int:
    """energon's `len(factory)`: the split's shard counts (excluded samples and those outside a `subset:`
    included), else the samples."""
    return sum(count for _name, count in source.split_shards) if source.split_shards else len(source)


def _shards(source: SplitSource) -> list[dict]:
    url = source.storage.url.rstrip("/")
    return [
        {"name": name, "count": count, "_path": f"{url}/{name}"} for name, count in source.split_shards or ()
    ]


def _members(source: SplitSource) -> list[SplitSource]:
    """The joined sources of a join (primary first); [source] otherwise."""
    members = getattr(source.builder, "keywords", {}).get("members")
    return [source, *(member for member, _rows in members)] if members else [source]


def webdataset_config(
    source: SplitSource,
    *,
    training: bool,
    decoder: Any,
    shuffle_over_epochs: int | None,
    parallel_shard_iters: int | None,
    max_samples_per_sequence: int | None,
    subflavors: dict | None = None,
) -> dict:
    """energon's `config()` of the factory of a prepared split (StandardWebdatasetFactory and kin; `decoder`: the
    task encoder's, None: none)."""
    out = {
        "type": factory_class(source).__name__,
        "training": training,
        "_path": source.storage.url,
        "shards": _shards(source),
        "sample_excludes": list(source.sample_excludes),
        "shuffle_over_epochs": shuffle_over_epochs,
        "parallel_shard_iters": parallel_shard_iters,
        "max_samples_per_sequence": max_samples_per_sequence,
        "subset": source.subset_config,
        "subflavors": {**(source.config.subflavors or {}), **(source.subflavors or {})}
        if subflavors is None
        else subflavors,
        "sample_loader": SAMPLE_LOADER,
    }
    return {**out, **(decoder.config() if decoder is not None else {})}


def factory_config(source: SplitSource, training: bool, decoder: Any, **options) -> dict:
    """energon's `config()` of the factory of `source` (`options`: shuffle_over_epochs, parallel_shard_iters,
    max_samples_per_sequence, as the factory holds them)."""
    kind = factory_class(source).__name__
    if kind == "DefaultCrudeJsonlDatasetFactory":
        return {
            "type": kind,
            "training": training,
            "_path": source.storage.url_of(source.shard_paths[0]),
            "jsonl_filename": source.shard_paths[0].rsplit("/", 1)[-1],
            "count": len(source),
            **options,
            "subset": source.subset_config,
            "subflavors": source.subflavors,
        }
    if kind == "JoinedWebdatasetFactory":
        # each member as its own factory describes it (the primary too: its class, no subset: the join has it)
        primary, *others = _members(source)
        members = [dataclasses.replace(primary, builder=None, subset_config=None), *others]
        joined = [
            webdataset_config(
                m, training=training, decoder=decoder, subflavors=source.subflavors or {}, **options
            )
            for m in members
        ]
        return {
            "type": kind,
            "joined_datasets": joined,
            "training": training,
            **options,
            "subset": source.subset_config,
        }
    return webdataset_config(source, training=training, decoder=decoder, **options)


def core_config(
    source: SplitSource,
    *,
    training: bool,
    decoder: Any,
    slice_offsets: list[list[int]],
    worker_config,
    shuffle_over_epochs: int | None,
    parallel_shard_iters: int | None,
    max_samples_per_sequence: int | None,
) -> dict:
    """energon's `factory.build().config()` for `source` (`slice_offsets`: per worker of this rank, its sequence
    boundaries in the source's rows, energon/train_order.py; energon counts them in the split's rows, a subset
    starting at `row_offset`)."""
    kind = factory_class(source).__name__
    load = {
        "DefaultCrudeJsonlDatasetFactory": JSONL_LOAD_SAMPLE_RAW,
        "JoinedWebdatasetFactory": JOINED_LOAD_SAMPLE,
    }
    parallel = parallel_shard_iters if parallel_shard_iters is not None else (16 if training else 1)
    loader = {
        "type": "WebdatasetSampleLoaderDataset",
        "joins": len(_members(source)),
        "len": sum(o[-1] - o[0] for o in slice_offsets),
        "slice_offsets": [[source.row_offset + i for i in o] for o in slice_offsets],  # in split rows
        "worker_config": worker_config.config(),
        "shuffle_over_epochs": shuffle_over_epochs if training else None,
        "parallel_slice_iters": parallel,
    }
    factory = factory_config(
        source,
        training,
        decoder,
        shuffle_over_epochs=shuffle_over_epochs,
        parallel_shard_iters=parallel_shard_iters,
        max_samples_per_sequence=max_samples_per_sequence,
    )
    return {
        "type": "MapDataset",
        "dataset": loader,
        "map_fn": load.get(kind, LOAD_SAMPLE_RAW),
        "map_fn_config": factory,
        "map_fn_stateless": True,
    }
