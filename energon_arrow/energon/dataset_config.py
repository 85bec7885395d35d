"""Mirrors `megatron.energon.dataset_config`: the same public names, from where energon_arrow implements them."""

from energon_arrow.energon.wrappers import get_dataset_from_config
from energon_arrow.meta.constants import META_DIR as MAIN_FOLDER_NAME

__all__ = ["MAIN_FOLDER_NAME", "get_dataset_from_config"]
