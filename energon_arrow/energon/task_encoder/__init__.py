"""Mirrors `megatron.energon.task_encoder`: the same public names, from where energon_arrow implements them."""

from energon_arrow.loader.energon_api import (
    AugmentTaskEncoder,
    DefaultTaskEncoder,
    TaskEncoder,
    get_train_dataset,
    get_val_dataset,
    get_val_datasets,
)
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
