"""Read saved loader states (torch.save files) into plain Python data without importing the classes they name.

energon's checkpoints pickle `megatron.energon` objects (SavableDataLoaderState, SavableDatasetCheckpoint,
FlexState, ...). energon-arrow never imports megatron-energon, so the unpickler below turns every object of a
`megatron.*` class into an `Opaque` record of its class name and pickled state; `plain()` then gives dicts,
lists and scalars (an object's class name under "__class__").
"""

from __future__ import annotations

import os
import pickle
import re
import types
from typing import Any

import click

FOREIGN_PREFIXES = ("megatron.",)


class Opaque:
    """An object of a class the file names but this process does not import: its class name, the positional
    arguments it was created with, its state and any items / list entries the pickle set on it."""

    qualname = "?"

    def __new__(cls, *args, **kwargs):
        obj = object.__new__(cls)
        obj.__dict__.update(_args=args, _state=None, _items={}, _list=[])
        return obj

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        self.__dict__["_state"] = state

    def __setitem__(self, key, value):
        self._items[key] = value

    def append(self, value):
        self._list.append(value)

    def extend(self, values):
        self._list.extend(values)

    def __repr__(self) -> str:
        return f"<{self.qualname}>"


_STANDINS: dict[str, type] = {}


def _standin(module: str, name: str) -> type:
    qualname = f"{module}.{name}"
    if qualname not in _STANDINS:
        _STANDINS[qualname] = type(name, (Opaque,), {"qualname": qualname, "__module__": module})
    return _STANDINS[qualname]


class _Unpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if module.startswith(FOREIGN_PREFIXES):
            return _standin(module, name)
        return super().find_class(module, name)


def _load(file, **kwargs):
    return _Unpickler(file, **kwargs).load()


# the pickle_module handed to torch.load: pickle's own functions, with our Unpickler
PICKLE_MODULE = types.ModuleType("energon_arrow_checkpoint_pickle")
PICKLE_MODULE.__dict__.update(
    {k: getattr(pickle, k) for k in dir(pickle) if not k.startswith("__")},
    Unpickler=_Unpickler,
    load=_load,
)


def load_state(path: str) -> Any:
    """A torch.save'd file (local path) loaded on the CPU, foreign classes as `Opaque` records."""
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=False, pickle_module=PICKLE_MODULE)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError) as exc:
        raise ValueError(
            f"{path}: not a torch.save'd checkpoint ({' '.join(str(exc).split())[:200]})"
        ) from None


def class_name(obj: Any) -> str:
    return obj.qualname if isinstance(obj, Opaque) else f"{type(obj).__module__}.{type(obj).__qualname__}"


def plain(obj: Any, limit: int | None = None) -> Any:
    """Dicts, lists and scalars for `obj` (Opaque records as {"__class__": name, ...their state}); with `limit`,
    longer lists and arrays are cut to their first `limit` entries plus a note."""

    def rec(v):
        return plain(v, limit)

    if isinstance(obj, Opaque):
        out: dict[str, Any] = {"__class__": obj.qualname.rsplit(".", 1)[-1]}
        state = obj._state
        if (
            isinstance(state, tuple)
            and len(state) == 2
            and all(s is None or isinstance(s, dict) for s in state)
        ):
            state = {**(state[0] or {}), **(state[1] or {})}  # (__dict__, __slots__ values)
        if isinstance(state, dict):
            out.update({str(k): rec(v) for k, v in state.items()})
        elif state is not None:
            out["state"] = rec(state)
        if obj._args:
            out["args"] = rec(list(obj._args))
        if obj._items:
            out["items"] = {str(k): rec(v) for k, v in obj._items.items()}
        if obj._list:
            out["list"] = rec(obj._list)
        return out
    if isinstance(obj, dict):
        return {str(k): rec(v) for k, v in obj.items()}
    if hasattr(obj, "tolist") and hasattr(obj, "shape"):  # tensors and numpy arrays
        obj = obj.tolist()
    if isinstance(obj, (list, tuple, set, frozenset)):
        items = list(obj)
        if limit is not None and len(items) > limit:
            return [rec(v) for v in items[:limit]] + [f"... ({len(items):,} items)"]
        return [rec(v) for v in items]
    if isinstance(obj, (str, int, float, bool, type(None))):
        return obj
    if isinstance(obj, bytes):
        return f"<{len(obj)} bytes>"
    return repr(obj)


# ---- the rank files of one checkpoint ---------------------------------------------------------------------


def natural_key(name: str) -> list:
    return [int(t) if t.isdigit() else t.lower() for t in re.split(r"(\d+)", name)]


def is_ours(state) -> bool:
    return isinstance(state, dict) and "version" in state and "next_batch" in state


def read_states(files: list[str]) -> tuple[bool, bool, list]:
    """(global checkpoint?, Megatron-style?, [(file name or None, rank state), ...])."""
    loaded = [load_state(f) for f in files]
    megatron = isinstance(loaded[0], dict) and "dataloader_state_dict" in loaded[0]
    if megatron:
        bad = [f for f, s in zip(files, loaded) if not (isinstance(s, dict) and "dataloader_state_dict" in s)]
        if bad:
            raise click.ClickException(f"{bad[0]}: no 'dataloader_state_dict' while {files[0]} has one")
        loaded = [s["dataloader_state_dict"] for s in loaded]
    if isinstance(loaded[0], list):
        if len(files) != 1:
            raise click.ClickException(
                f"{files[0]}: a global checkpoint (all ranks in one file) must come alone"
            )
        return True, megatron, [(None, s) for s in loaded[0]]
    return False, megatron, [(os.path.basename(f), s) for f, s in zip(files, loaded)]
