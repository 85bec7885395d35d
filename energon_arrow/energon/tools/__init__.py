"""Mirrors `megatron.energon.tools`: the same public names, from where energon_arrow implements them."""
