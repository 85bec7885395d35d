"""Mirrors `megatron.energon.errors`: the same public names, from where energon_arrow implements them."""

from energon_arrow.loader.errors import FatalSampleError
from energon_arrow.samples import SkipSample, log_exception, reraise_exception

__all__ = ["FatalSampleError", "SkipSample", "log_exception", "reraise_exception"]
