"""YAML/JSON parsing shared by the meta readers: errors name the file and line."""

from __future__ import annotations

import json

import yaml

from energon_arrow.meta.errors import MetaError


def parse_yaml(text: str, where: str):
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        loc = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise MetaError(f"{where}:{loc}: invalid YAML: {problem}") from None


def parse_json(text: str, where: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise MetaError(f"{where}: line {exc.lineno}, column {exc.colno}: invalid JSON: {exc.msg}") from None


def dump_yaml(obj) -> bytes:
    """YAML as energon writes it (`yaml.dump(..., sort_keys=False)`, block style)."""
    return yaml.safe_dump(obj, sort_keys=False).encode()
