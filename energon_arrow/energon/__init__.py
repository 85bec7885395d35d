"""The energon-compatibility layer: energon 7.4's API re-created over the fast core (energon_arrow.loader), for
drop-in use. It imports the core; the core never imports it.

- implementation: `get_*` and their arguments (energon_api, energon_args, energon_dataset, energon_len,
  worker_slices), task encoders (task_encoder/base.py) and their hooks (hooks, task_pipeline, packing, regroup,
  worker_regroup), savable loaders and restoring samples (savable_loader, restore_sample, worker_send, watchdog, debug_log),
  worker configs, cache pools, metadataset functions and sources (metadataset_api, metadataset_sources) and the
  wrapper datasets (wrappers/);
- mirrors: `energon_arrow.energon.a.b` mirrors `megatron.energon.a.b`: thin modules (docstring "Mirrors ...")
  that re-export, under energon's module path, the names energon_arrow implements (`from megatron.energon.a.b
  import X` -> `from energon_arrow.energon.a.b import X`; top-level names: `from energon_arrow import X`).
"""
