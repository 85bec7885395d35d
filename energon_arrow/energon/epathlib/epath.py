"""Mirrors `megatron.energon.epathlib.epath`: the same public names, from where energon_arrow implements them."""

from energon_arrow.adapters.urls import POSIX_PROFILE as DEFAULT_PROFILE_NAME
from energon_arrow.epathlib import EPath

__all__ = ["DEFAULT_PROFILE_NAME", "EPath"]
