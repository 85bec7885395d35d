"""Mirrors `megatron.energon.task_encoder.cooking`: the same public names, from where energon_arrow implements them."""

from energon_arrow.samples import Cooker, basic_sample_keys, cooker
from energon_arrow.samples.cookers import get_cooker_need_cache, get_cooker_need_primary

__all__ = ["Cooker", "basic_sample_keys", "cooker", "get_cooker_need_cache", "get_cooker_need_primary"]
