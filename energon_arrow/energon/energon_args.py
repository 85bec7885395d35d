"""energon 7.4's dataset / loader arguments that are not plain settings: what each means here.

- `parallel_shard_iters`: taken by get_train_dataset (energon's training order reads that many sequences at once
  per worker, energon/train_order.py); no effect elsewhere (validation reads one at a time, as energon does);
- accepted, no effect in this design (documented in docs/migration.md, never changing results):
  `checkpoint_every_sec`, `checkpoint_every_min_n_samples`, `n_checkpoints`,
  `gc_collect_every_n_steps`;
- `dataset_config` / `split_config` (`config_files`): other `.nv-meta` file names of a prepared dataset, as energon
  reads them (for a metadataset they belong in its YAML, per dataset);
- a dataset.yaml's own factory arguments: loader/dataset_yaml_args.py (opening a split applies them);
- refused with a LoaderError naming the argument when set to a value that would change results and that is not
  implemented: `subset=` (use a metadataset's `subset:`);
- energon's deprecated decoder arguments (`auto_decode`, `image_decode`, `av_decode`, `video_decode_audio`)
  set the task encoder's decoder exactly as energon does; the deprecated `handler` is used as the error handler
  of this dataset's task-encoder hooks (energon 7.4.1 warns and ignores it).
"""

from __future__ import annotations

import warnings
from typing import Any

from energon_arrow.loader.dataset_yaml_args import NO_EFFECT
from energon_arrow.loader.errors import LoaderError
from energon_arrow.samples.decoders import SampleDecoder

DEFAULT_CONFIG_FILES = {"dataset_config": "dataset.yaml", "split_config": "split.yaml"}
DECODER_KWARGS = ("image_decode", "av_decode", "video_decode_audio")


def refuse_unknown(kwargs: dict, function: str) -> None:
    if kwargs:
        raise LoaderError(f"{function}: unknown argument(s) {sorted(kwargs)} (not energon 7.4 arguments)")


def check_dataset_kwargs(kwargs: dict, function: str) -> None:
    """Pop and check the energon kwargs of get_train_dataset / get_val_dataset that have no setting here."""
    for name in list(kwargs):
        if name in NO_EFFECT:
            kwargs.pop(name)
    if kwargs.pop("subset", None) is not None:
        raise LoaderError(
            f"{function}: subset= is not supported here; give the subset in a metadataset (subset:)"
        )


def config_files(kwargs: dict, function: str) -> dict:
    """Pop energon's `dataset_config` / `split_config` (file names under the dataset's `.nv-meta`): the ones that
    differ from the defaults, for `open_sources`; a name that is not a plain relative file name is refused."""
    out = {}
    for name, default in DEFAULT_CONFIG_FILES.items():
        value = kwargs.pop(name, None)
        if value is None or value == default:
            continue
        if not isinstance(value, str) or not value or value.startswith("/") or ".." in value.split("/"):
            raise LoaderError(
                f"{function}: {name}={value!r} must name a file under the dataset's .nv-meta folder"
            )
        out[name] = value
    return out


def apply_deprecated_kwargs(kwargs: dict, task_encoder: Any) -> Any:
    """Apply energon's deprecated decoder arguments to `task_encoder.decoder` (as energon does) and return the
    deprecated `handler` (None when not given)."""
    from energon_arrow.energon.task_encoder.base import TaskEncoder

    handler = kwargs.pop("handler", None)
    if handler is not None:
        warnings.warn(
            "get_*_dataset(handler=...) is deprecated in energon; set worker_config.global_error_handler",
            DeprecationWarning,
            stacklevel=3,
        )
    auto_decode = kwargs.pop("auto_decode", True)
    decoder_kwargs = {k: kwargs.pop(k) for k in DECODER_KWARGS if k in kwargs}
    if not auto_decode:
        task_encoder.decoder = None
        return handler
    if not decoder_kwargs:
        return handler
    warnings.warn(
        f"decoder arguments {sorted(decoder_kwargs)} are deprecated in energon; set the task encoder's decoder",
        DeprecationWarning,
        stacklevel=3,
    )
    new = SampleDecoder(**decoder_kwargs)
    current = getattr(task_encoder, "decoder", None)
    if current is not None and current is not TaskEncoder.decoder:
        if current.config() == new.config():
            return handler
        raise LoaderError(
            "the task encoder already has a different decoder; set the decoder options on it, not as "
            f"arguments {sorted(decoder_kwargs)}"
        )
    task_encoder.decoder = new
    return handler
