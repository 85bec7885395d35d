"""energon's `megatron.energon.errors` names, for code that imports them from there (energon 7.4.1 does not
export FatalSampleError at its top level): `from energon_arrow.errors import FatalSampleError`."""

from energon_arrow.loader.errors import SYSTEM_EXCEPTIONS, FatalSampleError
from energon_arrow.samples.errors import SkipSample, log_exception, reraise_exception

__all__ = ["SYSTEM_EXCEPTIONS", "FatalSampleError", "SkipSample", "log_exception", "reraise_exception"]
