"""Mirrors `megatron.energon.media`: the same public names, from where energon_arrow implements them
(energon_arrow.media holds the list)."""

from energon_arrow.media import *  # noqa: F403
from energon_arrow.media import __all__  # noqa: F401
