"""pyproject.toml declares what the package imports, with the lower bounds that `make test-min` installs."""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
from pathlib import Path

import pytest
from packaging.version import Version

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _lower_bounds(requirements: list[str]) -> dict[str, str]:
    out = {}
    for req in requirements:
        m = re.search(r">=\s*([^,; ]+)", req)
        if m:
            out[_name(req)] = m.group(1)
    return out


def _third_party_imports() -> dict[str, str]:
    """Top-level module -> first file importing it, for every import in energon_arrow/ outside the stdlib."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / "energon_arrow").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "energon_arrow":
                    found.setdefault(top, str(path.relative_to(ROOT)))
    return found


def test_every_third_party_import_is_declared():
    declared = {_name(r) for r in PROJECT["dependencies"]}
    for extra in PROJECT["optional-dependencies"].values():
        declared |= {_name(r) for r in extra}
    dists = md.packages_distributions()
    missing = {}
    for module, where in _third_party_imports().items():
        names = {d.lower().replace("_", "-") for d in dists.get(module, [module])}
        if not names & declared:
            missing[module] = where
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"


def test_runtime_never_imports_the_reference_packages():
    assert "megatron" not in _third_party_imports()


def test_minimum_constraints_match_the_declared_lower_bounds():
    pins = {}
    for line in (ROOT / "constraints-min.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[name.strip().lower()] = version.strip()
    bounds = _lower_bounds(PROJECT["dependencies"])
    for extra in ("tokenizers", "msgpack", "av"):  # the extras `make test-min` installs
        bounds.update(_lower_bounds(PROJECT["optional-dependencies"][extra]))
    assert set(pins) == set(bounds), "constraints-min.txt must pin every declared lower bound"
    differ = {n: (bounds[n], pins[n]) for n in bounds if Version(pins[n]) != Version(bounds[n])}
    assert differ == {"torch": ("2.2", "2.13.0")}, (
        differ
    )  # the documented exception (no CPU wheel of 2.2 here)


def test_build_requirement_supports_the_spdx_license():
    assert isinstance(PROJECT["license"], str)  # PEP 639 expression: needs setuptools >= 77
    (req,) = [r for r in PYPROJECT["build-system"]["requires"] if _name(r) == "setuptools"]
    assert Version(_lower_bounds([req])["setuptools"]) >= Version("77")
    installed = md.version("setuptools")
    assert Version(installed) >= Version("77"), f"installed setuptools {installed} cannot build this project"


def test_reference_packages_are_pinned():
    for extra in ("test", "bench"):
        reqs = {_name(r): r for r in PROJECT["optional-dependencies"][extra]}
        assert reqs["megatron-energon"] == "megatron-energon==7.4.1"
        assert re.fullmatch(r"megatron-core==\d+\.\d+\.\d+", reqs["megatron-core"])
    try:
        installed = md.version("megatron-core")
    except md.PackageNotFoundError:
        return
    assert f"megatron-core=={installed}" in PROJECT["optional-dependencies"]["test"]
