"""Mirrors `megatron.energon.flavors.webdataset.sample_decoder`: the same public names, from where energon_arrow implements them."""

from energon_arrow.samples import SampleDecoder

__all__ = ["SampleDecoder"]
