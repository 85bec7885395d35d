"""Mirrors `megatron.energon.flavors.webdataset`: the same public names, from where energon_arrow implements them."""
