"""Mirrors `megatron.energon.wrappers`: the same public names, from where energon_arrow implements them."""

from energon_arrow.loader.wrappers import (
    BatchDataset,
    BlendDataset,
    ConcatDataset,
    EpochizeDataset,
    FilterDataset,
    GcDataset,
    GroupBatchDataset,
    IterMapDataset,
    LimitDataset,
    LogSampleDataset,
    MapDataset,
    MixBatchDataset,
    PackingDataset,
    RepeatDataset,
    ShuffleBufferDataset,
)
from energon_arrow.samples import SkipSample, concat_pad, generic_concat, homogeneous_concat_mix

__all__ = [
    "BatchDataset",
    "BlendDataset",
    "ConcatDataset",
    "EpochizeDataset",
    "FilterDataset",
    "GcDataset",
    "GroupBatchDataset",
    "IterMapDataset",
    "LimitDataset",
    "LogSampleDataset",
    "MapDataset",
    "MixBatchDataset",
    "PackingDataset",
    "RepeatDataset",
    "ShuffleBufferDataset",
    "SkipSample",
    "concat_pad",
    "generic_concat",
    "homogeneous_concat_mix",
]
