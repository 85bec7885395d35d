"""Mirrors `megatron.energon.cli`: the same public names, from where energon_arrow implements them."""
