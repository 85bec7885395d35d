"""The loader's sources for a dataset path: a prepared dataset, a crude `.jsonl` dataset or a metadataset split.

`open_sources(path, split_part, subflavors, storage_options, dataset_config, split_config)` opens every leaf of a metadataset (see metadataset/tree.py)
as a `SplitSource` with its subset, subflavors and aux stores applied, and keeps the blend mode: `weights` for
`blend:` (sampling proportions), `repetitions` for `blend_epochized:` (exact per-epoch counts).
`OpenedSources.dataset_arguments(training, repeat)` gives the matching `BatchDataset` blend arguments under energon's
rules (validation concatenates; a weighted blend needs `repeat=True`).
"""

from __future__ import annotations

from dataclasses import dataclass

from energon_arrow.loader.errors import LoaderError
from energon_arrow.loader.filestore import open_file_store
from energon_arrow.loader.source import SplitSource, open_split
from energon_arrow.metadataset.tree import Leaf, is_metadataset, resolve_split


@dataclass
class OpenedSources:
    sources: list[SplitSource]
    mode: str = "none"  # "none" | "weight" | "repetitions"
    weights: list[float] | None = None
    repetitions: list[float] | None = None
    #: each source's shuffle_over_epochs_multiplier from the metadataset (None when not a metadataset)
    multipliers: list[int | None] | None = None

    def dataset_arguments(self, training: bool, repeat: bool = True) -> dict:
        """`BatchDataset` blend keyword arguments for training or validation."""
        out: dict = {}
        if not training:
            return out  # validation concatenates the datasets, like energon
        if self.mode == "weight":
            if not repeat:
                raise LoaderError(
                    "a metadataset 'blend' (weights) needs repeat=True: weighted sampling has no epoch end "
                    "(energon refuses it too); use blend_epochized for a finite epoch"
                )
            out["weights"] = self.weights
        elif self.mode == "repetitions":
            out["repetitions"] = self.repetitions
        return out


def open_leaf(leaf: Leaf, storage_options: dict | None = None) -> SplitSource:
    """One leaf dataset as a SplitSource: subset rows, subflavors, aux stores."""
    if leaf.join is not None:
        from energon_arrow.loader.joined_source import open_joined

        src = open_joined(leaf, storage_options)
    elif leaf.path.endswith(".jsonl"):
        from energon_arrow.loader.jsonl_source import open_jsonl

        src = open_jsonl(leaf.path, storage_options, leaf.subflavors)
    else:
        src = open_split(
            leaf.path,
            leaf.split_part,
            storage_options,
            leaf.subflavors,
            dataset_yaml=leaf.dataset_config or "dataset.yaml",
            split_config=leaf.split_config or "split.yaml",
        )
    if leaf.subset is not None:
        if leaf.join is None:  # a join applied its subset to the joined rows (open_joined)
            # energon cuts the subset out of its index space, which counts the split's excluded samples
            n = src.energon_len()
            start, end = leaf.subset.bounds(n, src.name)
            if (start, end) != (0, n):
                src = src.energon_subset(start, end)
        src.subset_config = leaf.subset.energon_config()
    if leaf.aux:
        src.aux = {name: open_file_store(ref, storage_options) for name, ref in leaf.aux.items()}
    return src


def open_sources(
    path,
    split_part: str,
    subflavors: dict | None = None,
    storage_options: dict | None = None,
    dataset_config: str | None = None,
    split_config: str | None = None,
) -> OpenedSources:
    """The sources of `split_part` of a prepared dataset, a `.jsonl` file or a metadataset YAML; `dataset_config`
    / `split_config`: other file names under a prepared dataset's `.nv-meta` (None: dataset.yaml, split.yaml)."""
    path = str(path)
    configs = {k: v for k, v in (("dataset_config", dataset_config), ("split_config", split_config)) if v}
    if configs and (is_metadataset(path) or path.endswith(".jsonl")):
        kind = (
            "a .jsonl dataset has no .nv-meta"
            if path.endswith(".jsonl")
            else ("give them per dataset in the metadataset (dataset_config: / split_config:)")
        )
        raise LoaderError(f"{path}: {sorted(configs)} apply to a prepared dataset: {kind}")
    if not is_metadataset(path):
        return OpenedSources([open_leaf(Leaf(path, split_part, subflavors, **configs), storage_options)])
    resolved = resolve_split(path, split_part, subflavors, storage_options)
    sources = [open_leaf(leaf, storage_options) for leaf in resolved.leaves]
    multipliers = [leaf.shuffle_over_epochs for leaf in resolved.leaves]
    if resolved.mode == "weight":
        weights = [float(leaf.weight) for leaf in resolved.leaves]
        return OpenedSources(sources, "weight", weights=weights, multipliers=multipliers)
    if resolved.mode == "repetitions":
        repetitions = [float(leaf.repetitions) for leaf in resolved.leaves]
        return OpenedSources(sources, "repetitions", repetitions=repetitions, multipliers=multipliers)
    return OpenedSources(sources, multipliers=multipliers)
