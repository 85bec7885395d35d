"""A dataset.yaml's energon factory arguments, as opening a split applies them (`yaml_split_args`): `split_config`
/ `split_part` applied (they win over the caller's, as in energon), the energon arguments that have no effect in
this design (`NO_EFFECT`, also accepted by the energon layer's loading functions) accepted, the others refused
naming file, line and key.
"""

from __future__ import annotations

from energon_arrow.loader.errors import LoaderError

# argument -> (energon's default, why it has no effect here); any value is accepted
NO_EFFECT = {
    "parallel_shard_iters": "reads are planned per batch over the whole split, not per open shard iterator",
    "checkpoint_every_sec": "the loader state is exact after every batch; there are no internal checkpoints",
    "checkpoint_every_min_n_samples": "the loader state is exact after every batch",
    "n_checkpoints": "the loader state is exact after every batch",
    "gc_collect_every_n_steps": "the collector is not run on a schedule (gc.freeze() before forking workers)",
}
# dataset.yaml factory arguments refused here, and what to do instead
_YAML_REFUSED = {
    "shuffle_over_epochs": "pass shuffle_over_epochs_multiplier to get_train_dataset",
    "max_samples_per_sequence": "pass max_samples_per_sequence to get_train_dataset",
    "subset": "give the subset in a metadataset (subset:)",
    "training": "it is decided by get_train_dataset / get_val_dataset",
    "decoder": "set the task encoder's decoder",
    "path": "the dataset is the folder of the .nv-meta holding this file",
    "worker_config": "pass worker_config to the loading function",
}


def yaml_split_args(config) -> dict:
    """The `split_config` / `split_part` a dataset.yaml (`DatasetYaml`) names (they win over the caller's, as in
    energon); its other energon factory arguments are refused (LoaderError naming file, line and key), except
    `parallel_shard_iters` (no effect, NO_EFFECT)."""
    out = {}
    for key, value in config.factory_args.items():
        if key in ("split_config", "split_part"):
            if not isinstance(value, str) or not value:
                raise LoaderError(f"{config.locate(key)}: expected a file name / split name, got {value!r}")
            if key == "split_config" and (value.startswith("/") or ".." in value.split("/")):
                raise LoaderError(
                    f"{config.locate(key)}: {value!r} must name a file under the .nv-meta folder"
                )
            out[key] = value
        elif key not in NO_EFFECT:
            raise LoaderError(
                f"{config.locate(key)}: not supported in a dataset.yaml by energon_arrow; {_YAML_REFUSED[key]}"
            )
    return out
