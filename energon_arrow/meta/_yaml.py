"""YAML/JSON parsing shared by the meta readers: errors name the file and line."""

from __future__ import annotations

import json

import yaml

from energon_arrow.meta.errors import MetaError


def _yaml_error(exc: yaml.YAMLError, where: str) -> MetaError:
    mark = getattr(exc, "problem_mark", None)
    loc = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = getattr(exc, "problem", None) or str(exc)
    return MetaError(f"{where}:{loc}: invalid YAML: {problem}")


def parse_yaml(text: str, where: str):
    try:
        # libyaml's loader when built in: 10-20x faster on split.yaml files with many exclude entries
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, where) from None


def parse_json(text: str, where: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise MetaError(f"{where}: line {exc.lineno}, column {exc.colno}: invalid JSON: {exc.msg}") from None


def dump_yaml(obj) -> bytes:
    """YAML as energon writes it (`yaml.dump(..., sort_keys=False)`, block style)."""
    return yaml.safe_dump(obj, sort_keys=False).encode()


class YamlMap(dict):
    """A YAML mapping that remembers the 1-based line of each key (`key_lines`) and of itself (`line`)."""

    line: int = 0
    key_lines: dict

    def line_of(self, key) -> int:
        return self.key_lines.get(key, self.line)


def _tracked_loader():
    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Loader(base):  # type: ignore[misc, valid-type]
        pass

    def construct(loader, node):
        out = YamlMap()
        out.line = node.start_mark.line + 1
        out.key_lines = {}
        loader.flatten_mapping(node)
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            out[key] = loader.construct_object(value_node, deep=True)
            out.key_lines[key] = key_node.start_mark.line + 1
        return out

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct)
    return Loader


def parse_yaml_tracked(text: str, where: str):
    """Like `parse_yaml`, but every mapping is a `YamlMap` knowing the line of each key (for errors that name
    the line of a misspelled key)."""
    try:
        return yaml.load(text, Loader=_tracked_loader())
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, where) from None
