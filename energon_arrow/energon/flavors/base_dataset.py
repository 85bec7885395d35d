"""Mirrors `megatron.energon.flavors.base_dataset`: the same public names, from where energon_arrow implements them."""

from energon_arrow.energon.wrappers import SavableDataset
from energon_arrow.energon.wrappers.base import add_sample_restore_key, set_sample_restore_key
from energon_arrow.energon.wrappers.factories import BaseCoreDatasetFactory
from energon_arrow.samples import Sample
from energon_arrow.samples.sample import ExtendableDataclassMixin, PinMemoryMixin

__all__ = [
    "BaseCoreDatasetFactory",
    "ExtendableDataclassMixin",
    "PinMemoryMixin",
    "Sample",
    "SavableDataset",
    "add_sample_restore_key",
    "set_sample_restore_key",
]
