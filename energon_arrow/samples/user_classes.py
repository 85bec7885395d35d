"""Import a class a YAML file names by `__module__` + `__class__` (a user's sample type, a joiner), as energon does.

`import_named(module, name, where)`: `importlib.import_module(module)` then the attribute, with two additions:
- the training script itself: `__module__: __main__`, or the script's own module name while it runs as
  `__main__` (`python train.py` naming `train`), gives the running script's module instead of importing (and
  running) the script a second time;
- a top-level module not on the Python path is also looked up in the working directory (`my_module.py` next to
  where the job was started).
Errors are LoaderErrors naming `where` (the YAML file, line and key).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from types import ModuleType

from energon_arrow.loader.errors import LoaderError


def _main_module(module: str) -> ModuleType | None:
    """The running script's module when `module` names it (`__main__`, or its own name while run as a script)."""
    main = sys.modules.get("__main__")
    if main is None:
        return None
    if module == "__main__":
        return main
    spec = getattr(main, "__spec__", None)
    own = (
        spec.name
        if spec is not None
        else os.path.splitext(os.path.basename(getattr(main, "__file__", "")))[0]
    )
    return main if own == module and module not in sys.modules else None


def _import(module: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        top = module.split(".", 1)[0]
        cwd = os.getcwd()
        if exc.name != top or cwd in sys.path or "" in sys.path:
            raise
        sys.path.insert(0, cwd)  # the working directory, for this import only
        try:
            return importlib.import_module(module)
        finally:
            sys.path.remove(cwd)


def module_exists(module: str) -> bool:
    """Whether `module` can be found on the Python path (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def import_named(module: str, name: str, where: str):
    """`module.name` (see the module docstring); LoaderError naming `where` when it cannot be imported."""
    mod = _main_module(module)
    if mod is None:
        try:
            mod = _import(module)
        except ImportError as exc:
            raise LoaderError(
                f"{where}: cannot import module {module!r} (for {name!r}): {exc}; it must be importable from the "
                "Python path or the working directory"
            ) from None
        except Exception as exc:  # the module itself failed while importing
            raise LoaderError(
                f"{where}: importing module {module!r} failed: {type(exc).__name__}: {exc}"
            ) from exc
    try:
        return getattr(mod, name)
    except AttributeError:
        raise LoaderError(f"{where}: module {module!r} ({mod.__file__}) defines no {name!r}") from None
