"""Every public name of `megatron.energon` is importable from `energon_arrow` (issue 12), except a short,
documented allow-list (docs/migration.md, "Names not exported")."""

from __future__ import annotations

import types

import pytest

import energon_arrow as ea

me = pytest.importorskip("megatron.energon")

# `version` is importlib.metadata.version, leaked into energon's namespace by its __init__ (not an energon API)
NOT_EXPORTED = {"version"}


def test_missing_names_are_only_the_allow_list():
    missing = {
        n
        for n in dir(me)
        if not n.startswith("_") and not isinstance(getattr(me, n), types.ModuleType) and not hasattr(ea, n)
    }
    assert missing == NOT_EXPORTED


def test_bracecollapse_module():
    from megatron.energon.bracecollapse import collapse as energon_collapse

    from energon_arrow.bracecollapse import collapse
    from energon_arrow.meta.braces import expand_braces

    assert ea.bracecollapse.collapse is collapse
    names = ["s/a001.tar", "s/a003.tar", "s/a002.tar", "s/b.tar", "x/y1.jpg", "x/y2.jpg", "x/y10.jpg"]
    assert collapse(names, keep_order=True) == energon_collapse(names, keep_order=True)
    short = collapse(names)
    assert sorted(x for p in short for x in expand_braces(p)) == sorted(names)
    assert "s/a{001..003}.tar" in short and len(short) <= len(energon_collapse(names))


def test_errors_module():
    """`megatron.energon.errors` is where energon 7.4.1 code imports FatalSampleError from."""
    import megatron.energon.errors as energon_errors

    import energon_arrow.errors as errors

    assert errors.FatalSampleError is ea.FatalSampleError and errors.SkipSample is ea.SkipSample
    assert all(hasattr(energon_errors, name) for name in errors.__all__)


# ---- the mirror package: `megatron.energon.a.b` -> `energon_arrow.energon.a.b` -----------------------------------

# every `megatron.energon.a.b` module path energon 7.4.1's documentation and tests import from, with the names they
# import (or name in the text) that energon_arrow implements
MIRRORED = {
    "av": ["AVData", "AVDecoder", "get_clips_uniform", "get_single_frames_uniform"],
    "cache": ["CachePool", "DecodeFileStore", "FileCacheLazy", "FileStore", "FileStoreCachePool", "Lazy"],
    "cache.base": ["CachePool"],
    "cli.main": ["prepare_media_command"],
    "dataset_config": ["get_dataset_from_config"],
    "edataclass": ["edataclass"],
    "epathlib": ["EPath"],
    "epathlib.epath": ["EPath"],
    "errors": ["reraise_exception"],
    "flavors": ["BaseWebdatasetFactory", "CrudeJsonlDatasetFactory"],
    "flavors.base_dataset": ["Sample"],
    "flavors.webdataset.config": ["INDEX_SQLITE_FILENAME", "INFO_JSON_FILENAME", "MAIN_FOLDER_NAME"],
    "flavors.webdataset.sample_decoder": ["SampleDecoder"],
    "flavors.webdataset.base_webdataset": ["BaseWebdatasetFactory"],
    "flavors.webdataset.default_generic_webdataset": ["DefaultGenericWebdatasetFactory"],
    "loader": ["get_savable_loader"],
    "media": ["AVMetadata"],
    "media.extractor": ["MediaFilterConfig", "MediaFilterStrategy"],
    "media.metadata": ["AVMetadata", "ImageMetadata"],
    "metadataset.loader": ["load_dataset", "prepare_metadataset", "traverse_metadataset"],
    "metadataset.loader_interface": ["DatasetBlendMode"],
    "sample_utils": ["default_get_batch_keys"],
    "source_info": ["SourceInfo"],
    "task_encoder.base": ["DefaultTaskEncoder", "TaskEncoder", "stateless"],
    "task_encoder.cooking": ["basic_sample_keys", "cooker"],
    "tools.analyze_debug": ["command"],
    "tools.checkpoint": ["command", "command_info", "command_redist"],
    "tools.info": ["command"],
    "tools.lint": ["command"],
    "tools.prepare": ["command"],
    "tools.preview": ["command"],
    "wrappers.blend_dataset": ["BlendDataset"],
}
# energon's file-name constants, re-exported under energon's names
CONSTANTS = {"MAIN_FOLDER_NAME", "INDEX_SQLITE_FILENAME", "INDEX_UUID_FILENAME", "INFO_JSON_FILENAME",
             "INFO_YAML_FILENAME", "SPLIT_YAML_FILENAME"}  # fmt: skip


def _is_mirror(module) -> bool:
    """A thin re-export module of the mirror (its docstring says so); the others implement the energon layer."""
    return (module.__doc__ or "").startswith("Mirrors `megatron.energon")


def _mirror_modules():
    """The modules of energon_arrow.energon at one of energon's module paths: the mirrors and the implementing
    modules that sit at energon's path (task_encoder.base, wrappers.base, ...)."""
    import importlib
    import importlib.util
    import pkgutil

    import energon_arrow.energon as mirror

    out = []
    for info in pkgutil.walk_packages(mirror.__path__, "energon_arrow.energon."):
        energon_path = "megatron.energon" + info.name[len("energon_arrow.energon") :]
        try:
            at_energon_path = importlib.util.find_spec(energon_path) is not None
        except ImportError:
            at_energon_path = False
        if at_energon_path or _is_mirror(importlib.import_module(info.name)):
            out.append(info.name)
    return out


@pytest.mark.parametrize("path", sorted(MIRRORED))
def test_mirror_has_the_names_energon_users_import(path):
    import importlib

    mod = importlib.import_module(f"energon_arrow.energon.{path}")
    assert set(MIRRORED[path]) <= set(mod.__all__)
    # a mirror says what it mirrors; a module implementing energon's names at energon's path names that path
    assert mod.__doc__.startswith(f"Mirrors `megatron.energon.{path}`") or (
        not _is_mirror(mod) and f"`megatron.energon.{path}`" in mod.__doc__
    )


@pytest.mark.parametrize("module_name", _mirror_modules())
def test_mirror_names_are_the_implementing_objects(module_name):
    """Each exported name is the object energon_arrow implements (the top-level export where there is one, else an
    object of a module that is not a mirror), and energon's module of the same path has that name."""
    import importlib
    import sys

    mod = importlib.import_module(module_name)
    energon_path = "megatron.energon" + module_name[len("energon_arrow.energon") :]
    try:
        energon_mod = importlib.import_module(energon_path)
    except ImportError:  # an optional dependency of energon's module (PyAV) is missing here
        energon_mod = None
    for name in getattr(mod, "__all__", ()):
        obj = getattr(mod, name)
        if name in ea._LOADER_EXPORTS:
            assert obj is getattr(ea, name), f"{module_name}.{name}"
        elif name in CONSTANTS:
            assert energon_mod is None or obj == getattr(energon_mod, name)
        else:
            implementing = [
                m
                for n, m in list(sys.modules.items())
                if n.startswith("energon_arrow.") and not _is_mirror(m)
                and any(v is obj for v in vars(m).values())
            ]  # fmt: skip
            assert implementing, f"{module_name}.{name} is no energon_arrow module's object"
        if energon_mod is not None:
            assert hasattr(energon_mod, name), f"{energon_path} has no {name}"


def test_mirror_checkpoint_commands_are_the_cli_commands():
    from energon_arrow.cli import checkpoint
    from energon_arrow.energon.tools import checkpoint as mirrored

    assert mirrored.command is checkpoint.command and mirrored.command_redist is checkpoint.command_redist
