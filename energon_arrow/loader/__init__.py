"""The high-throughput loader for prepared WebDatasets and the shared host-to-device transfer stage.

Public names (imported on first use so that `energon_arrow.loader.transfer` stays light for other loaders):
`Loader`, `BatchDataset`, `LoaderSettings`, `open_split`, `SplitSource`, `PartStore`, `FolderStore`,
`open_file_store`, `DeviceTransfer`, `iter_to_device`, and the errors `LoaderError`, `StaleIndexError`,
`DecodeError`, `MissingPartError`, `ErrorBudgetExceeded`. The energon-named shims live in
`energon_arrow.energon.energon_api` and are exported from `energon_arrow`.
"""

_EXPORTS = {
    "Loader": "energon_arrow.loader.loader",
    "BatchDataset": "energon_arrow.loader.dataset",
    "LoaderSettings": "energon_arrow.loader.dataset",
    "open_split": "energon_arrow.loader.source",
    "SplitSource": "energon_arrow.loader.source",
    "PartStore": "energon_arrow.loader.filestore",
    "FolderStore": "energon_arrow.loader.filestore",
    "open_file_store": "energon_arrow.loader.filestore",
    "DeviceTransfer": "energon_arrow.loader.transfer",
    "iter_to_device": "energon_arrow.loader.transfer",
    "LoaderError": "energon_arrow.loader.errors",
    "StaleIndexError": "energon_arrow.loader.errors",
    "DecodeError": "energon_arrow.loader.errors",
    "MissingPartError": "energon_arrow.loader.errors",
    "ErrorBudgetExceeded": "energon_arrow.loader.errors",
}

__all__ = sorted(_EXPORTS)

# a module that moved to the energon layer, still reachable here by its old name because the energon suite's
# measuring shim (../shared/energon-suite/shim) imports it as `from energon_arrow.loader import energon_api`;
# resolved on attribute access only: nothing in the core imports it
_MOVED = {"energon_api": "energon_arrow.energon.energon_api"}


def __getattr__(name):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    if name in _MOVED:
        import importlib

        return importlib.import_module(_MOVED[name])
    raise AttributeError(f"module 'energon_arrow.loader' has no attribute {name!r}")
