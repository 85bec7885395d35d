"""Mirrors `megatron.energon.task_encoder.base`: the same public names, from where energon_arrow implements them."""

from energon_arrow.loader.energon_api import AugmentTaskEncoder, DefaultTaskEncoder, TaskEncoder
from energon_arrow.samples import (
    Batch,
    batch_list,
    batch_pad_stack,
    batch_stack,
    generic_batch,
    get_stateless,
    stateless,
)
from energon_arrow.samples.stateless import get_failure_tolerance

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
