"""The metadataset YAML model (energon 7.4's `MetadatasetV2` and v1 `Metadataset` files): `tree` resolves one
split to its leaf datasets (blend weights / repetitions, subflavors, subsets, aux stores, joins), `subset` is the
subset-range arithmetic, `join_index` names, checks and writes energon's join indexes.

Formats and pure arithmetic, used by the core's sources (loader/joined_source.py) and by the energon layer
(energon_arrow.energon: metadataset sources, wrappers, `prepare_metadataset`); nothing here imports the energon layer.
"""
