"""Mirrors `megatron.energon.task_encoder`: the same public names, from where energon_arrow implements them.

The task encoders are implemented in `energon_arrow.energon.task_encoder.base`; the loading functions
(`get_train_dataset`, ...) come from `energon_arrow.energon.energon_api`, on first use: that module imports the
task encoders from this package, so importing it here would be circular.
"""

from energon_arrow.energon.task_encoder.base import AugmentTaskEncoder, DefaultTaskEncoder, TaskEncoder
from energon_arrow.samples import (
    Batch,
    Cooker,
    basic_sample_keys,
    batch_list,
    batch_pad_stack,
    batch_stack,
    cooker,
    generic_batch,
    stateless,
)

_LOADING = ("get_train_dataset", "get_val_dataset", "get_val_datasets")

__all__ = [
    "AugmentTaskEncoder",
    "Batch",
    "Cooker",
    "DefaultTaskEncoder",
    "TaskEncoder",
    "basic_sample_keys",
    "batch_list",
    "batch_pad_stack",
    "batch_stack",
    "cooker",
    "generic_batch",
    "get_train_dataset",
    "get_val_dataset",
    "get_val_datasets",
    "stateless",
]


def __getattr__(name):
    if name in _LOADING:
        from energon_arrow.energon import energon_api

        return getattr(energon_api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
