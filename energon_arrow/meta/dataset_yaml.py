"""`.nv-meta/dataset.yaml`: which sample type the shards hold and how parts map to its fields.

Three shapes (energon 7.4.1), each also in energon's class style (`__module__: megatron.energon`,
`__class__: CaptioningWebdataset` / `TextWebdataset` / ... instead of `sample_type`, or
`__class__: StandardWebdatasetFactory` next to `sample_type`):
- field map:     `{sample_type: {__module__: megatron.energon, __class__: X}, field_map: {field: "jpg", ...}}`
- sample loader: `{sample_type: {...}, sample_loader: "sample_loader.py:sample_loader",
                   part_filter: "sample_loader.py:part_filter"}` (code next to the yaml)
- crude:         `{__module__: megatron.energon, __class__: CrudeWebdataset}` (+ optional subflavors, part_filter)

Other top-level keys: energon's factory arguments (`FACTORY_KEYS`, kept in `DatasetYaml.factory_args`; the loader
applies or refuses each, energon/energon_args.py); any other key is a MetaError naming file, line and key.

API: `DatasetYaml` (fields `sample_type`, `field_map`, `sample_loader`, `part_filter`, `subflavors`, `crude`,
`factory_args`, `where`, `key_lines`; `locate(key)` -> "file:line: key"),
`parse_dataset_yaml(text, where)`, `read_dataset_yaml(storage, name="dataset.yaml")`, `dataset_yaml_bytes(d)`,
`field_map_dataset(type, field_map)`, `sample_loader_dataset(type)`, `crude_dataset()`,
`check_sample_type(name)`, `parse_field_map(json_text)`, `field_map_parts(field_map)` (part names a field map
reads: `"json[a][0]"` -> `json`, `"jpg,png"` -> `jpg`, `png`), `check_field_map(type, field_map, found_parts)`,
and `sample_loader_py(type, parts)` (the template energon writes to `sample_loader.py`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from energon_arrow.meta._yaml import dump_yaml, parse_yaml_tracked
from energon_arrow.meta.constants import DATASET_YAML, META_DIR
from energon_arrow.meta.errors import MetaError
from energon_arrow.meta.manifest import read_text_verified
from energon_arrow.meta.sample_types import ALL_TYPE_NAMES, CRUDE, SAMPLE_TYPES

ENERGON_MODULE = "megatron.energon"
SAMPLE_LOADER_REF = "sample_loader.py:sample_loader"
PART_FILTER_REF = "sample_loader.py:part_filter"


@dataclass
class DatasetYaml:
    sample_type: str | None = None  # class name; None for crude datasets
    sample_type_module: str = ENERGON_MODULE
    field_map: dict[str, str] | None = None
    sample_loader: str | None = None
    part_filter: str | list[str] | None = None
    subflavors: dict | None = None
    crude: bool = False
    #: energon's dataset-factory arguments given in the yaml (FACTORY_KEYS; the loader applies or refuses each)
    factory_args: dict = field(default_factory=dict)
    dataset_class: str | None = (
        None  # class-style dataset.yaml: `__class__: TextWebdataset` (kept when rewriting)
    )
    where: str = field(default=DATASET_YAML, compare=False)  # the file, for messages
    key_lines: dict = field(default_factory=dict, compare=False, repr=False)  # top-level key -> 1-based line

    def locate(self, key: str) -> str:
        """`file:line: key` of a top-level key, for error messages."""
        line = self.key_lines.get(key)
        return f"{self.where}:{line}: {key}" if line else f"{self.where}: {key}"


#: energon's dataset-factory arguments (StandardWebdatasetFactory / CrudeWebdataset constructors) that a
#: dataset.yaml may give besides the sample description; as in energon, the yaml's value wins over the caller's.
FACTORY_KEYS = frozenset(
    {
        "split_config", "split_part", "shuffle_over_epochs", "parallel_shard_iters", "max_samples_per_sequence",
        "subset", "training", "decoder", "path", "worker_config",
    }
)  # fmt: skip
_SAMPLE_KEYS = ("sample_type", "field_map", "sample_loader", "part_filter", "subflavors")


def check_sample_type(name: str) -> str:
    if name not in ALL_TYPE_NAMES:
        raise MetaError(f"--sample-type {name!r}: unknown sample type; known: {', '.join(ALL_TYPE_NAMES)}")
    return name


def parse_field_map(text: str) -> dict[str, str]:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MetaError(f"--field-map: invalid JSON at char {exc.pos}: {exc.msg}") from None
    if not isinstance(raw, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in raw.items()
    ):
        raise MetaError('--field-map: expected a JSON object of field -> part, like {"image": "jpg"}')
    return raw


def field_map_parts(value: str) -> list[str]:
    """Part names one field_map value reads: alternatives split on ',', JSON paths `[..]` removed."""
    return [option.split("[", 1)[0].strip() for option in value.split(",")]


def check_field_map(sample_type: str, field_map: dict[str, str], found_parts=None) -> None:
    """Fields must exist in the type, required fields must be mapped, mapped parts must exist in the data."""
    fields = {f.name: f for f in SAMPLE_TYPES.get(sample_type, ())}
    if sample_type == CRUDE:
        raise MetaError("--field-map: CrudeWebdataset takes no field map (samples go to a cooker)")
    unknown = [k for k in field_map if k not in fields]
    if unknown:
        raise MetaError(f"--field-map: {sample_type} has no field(s) {unknown}; fields: {sorted(fields)}")
    missing = [f.name for f in fields.values() if f.required and f.name not in field_map]
    if missing:
        raise MetaError(f"--field-map: required field(s) {missing} of {sample_type} are not mapped")
    if found_parts is not None:
        found = set(found_parts)
        for key, value in field_map.items():
            parts = field_map_parts(value)
            if not any(p in found for p in parts):
                raise MetaError(
                    f"--field-map: field {key!r} maps to part {value!r}, but the shards have only parts "
                    f"{sorted(found)}"
                )


def field_map_dataset(sample_type: str, field_map: dict[str, str]) -> DatasetYaml:
    return DatasetYaml(sample_type=check_sample_type(sample_type), field_map=dict(field_map))


def sample_loader_dataset(sample_type: str) -> DatasetYaml:
    return DatasetYaml(
        sample_type=check_sample_type(sample_type),
        sample_loader=SAMPLE_LOADER_REF,
        part_filter=PART_FILTER_REF,
    )


def crude_dataset() -> DatasetYaml:
    return DatasetYaml(crude=True)


# energon's generic dataset classes, which take a `sample_type`
_FACTORIES = (
    "StandardWebdatasetFactory",
    "DefaultGenericWebdatasetFactory",
    "DefaultDecoderWebdatasetFactory",
)


# energon 7.4.1's (deprecated) per-type dataset classes and the sample type each loads
_CLASS_SAMPLE = {
    f"{name}Webdataset": f"{name}Sample"
    for name in (
        "Captioning", "Image", "ImageClassification", "Interleaved", "MultiChoiceVQA", "OCR",
        "SimilarityInterleaved", "Text", "VidQA", "VQA", "VQAOCR",
    )
}  # fmt: skip


def _dataset_class(raw: dict, where: str) -> str | None:
    """The `__class__` of a class-style dataset.yaml (popped with its `__module__`), None when absent."""
    if "__class__" not in raw:
        return None
    cls, module = str(raw.pop("__class__")), raw.pop("__module__", ENERGON_MODULE)
    if module != ENERGON_MODULE:
        raise MetaError(
            f"{where}: __module__ {module!r} __class__ {cls!r}: user dataset factory classes (e.g. a subclass "
            "overriding load_sample) are not supported, only megatron.energon's dataset classes; move the "
            "per-sample code to a sample_loader (sample_loader.py) or the task encoder"
        )
    if cls in _FACTORIES:
        return cls
    if cls in _CLASS_SAMPLE:
        return cls
    known = sorted([*_FACTORIES, *_CLASS_SAMPLE, CRUDE])
    raise MetaError(f"{where}: unknown dataset __class__ {cls!r}; known: {', '.join(known)}")


def _check_keys(raw: dict, crude: bool, where: str, lines: dict) -> None:
    """Every top-level key must be one energon's dataset classes take (a crude dataset: no sample keys)."""
    allowed = FACTORY_KEYS | {"part_filter", "subflavors"} | (set() if crude else set(_SAMPLE_KEYS))
    for key in raw:
        if key in allowed:
            continue
        at = f"{where}:{lines[key]}" if key in lines else where
        if crude and key in _SAMPLE_KEYS:
            raise MetaError(f"{at}: {key}: CrudeWebdataset takes no {key} (samples go to a cooker)")
        raise MetaError(
            f"{at}: unknown key {key!r}; a dataset.yaml takes {', '.join(sorted(allowed))} "
            "(and __module__ / __class__)"
        )


def parse_dataset_yaml(text: str, where: str = DATASET_YAML) -> DatasetYaml:
    raw = parse_yaml_tracked(text, where)
    if not isinstance(raw, dict):
        raise MetaError(f"{where}: expected a mapping")
    lines = dict(getattr(raw, "key_lines", {}))
    raw = dict(raw)
    crude = raw.get("__class__") == CRUDE
    if crude:
        raw.pop("__module__", None)
        raw.pop("__class__")
        _check_keys(raw, True, where, lines)
        out = DatasetYaml(crude=True)
    else:
        dataset_class = _dataset_class(raw, where)
        _check_keys(raw, False, where, lines)
        st = raw.pop("sample_type", None)
        if dataset_class in _FACTORIES or dataset_class is None:
            if not isinstance(st, dict) or "__class__" not in st:
                raise MetaError(f"{where}: 'sample_type' must be a mapping with __module__ and __class__")
        elif st is not None:
            raise MetaError(f"{where}: {dataset_class} fixes the sample type; remove 'sample_type'")
        else:  # class style: `__class__: CaptioningWebdataset` loads CaptioningSample
            st = {"__module__": ENERGON_MODULE, "__class__": _CLASS_SAMPLE[dataset_class]}
        unknown = sorted(set(st) - {"__module__", "__class__"})
        if unknown:
            raise MetaError(f"{where}:{lines.get('sample_type', '?')}: sample_type: unknown key(s) {unknown}")
        out = DatasetYaml(sample_type=str(st["__class__"]), sample_type_module=str(st.get("__module__", "")))
        out.dataset_class = dataset_class
        fm = raw.pop("field_map", None)
        if fm is not None and not isinstance(fm, dict):
            raise MetaError(f"{where}: 'field_map' must be a mapping of field -> part")
        out.field_map = None if fm is None else {str(k): str(v) for k, v in fm.items()}
        out.sample_loader = raw.pop("sample_loader", None)
        if out.field_map is None and out.sample_loader is None:
            raise MetaError(f"{where}: needs a 'field_map' or a 'sample_loader'")
        if out.field_map is not None and out.sample_loader is not None:
            raise MetaError(
                f"{where}:{lines.get('sample_loader', '?')}: sample_loader: give a 'field_map' or a "
                "'sample_loader', not both"
            )
    out.part_filter = raw.pop("part_filter", None)
    out.subflavors = raw.pop("subflavors", None)
    out.factory_args = raw  # only FACTORY_KEYS are left (checked above)
    out.where, out.key_lines = where, lines
    return out


def read_dataset_yaml(storage, name: str = DATASET_YAML) -> DatasetYaml:
    rel = f"{META_DIR}/{name}"
    return parse_dataset_yaml(read_text_verified(storage, rel), storage.url_of(rel))  # user-editable


def dataset_yaml_bytes(d: DatasetYaml) -> bytes:
    if d.crude:
        obj: dict = {"__module__": ENERGON_MODULE, "__class__": CRUDE}
    else:
        obj = {} if d.dataset_class is None else {"__module__": ENERGON_MODULE, "__class__": d.dataset_class}
        if d.dataset_class is None or d.dataset_class in _FACTORIES:
            obj["sample_type"] = {"__module__": d.sample_type_module, "__class__": d.sample_type}
        if d.field_map is not None:
            obj["field_map"] = dict(d.field_map)
        if d.sample_loader is not None:
            obj["sample_loader"] = d.sample_loader
    if d.part_filter is not None:
        obj["part_filter"] = d.part_filter
    if d.subflavors is not None:
        obj["subflavors"] = d.subflavors
    obj.update(d.factory_args)
    return dump_yaml(obj)


def sample_loader_py(sample_type: str, parts) -> bytes:
    """A `sample_loader.py` template for `sample_type` whose part filter keeps `parts`."""
    lines = [
        "# This file was generated by `energon-arrow prepare`.",
        "# TODO: edit it to return the proper fields.",
        "",
        "",
        "def sample_loader(raw: dict) -> dict:",
        "    # Images are already decoded to tensors. Set the values of all (required) fields.",
        "    return dict(",
    ]
    for f in SAMPLE_TYPES[sample_type]:
        hint = f"  # expected type: {f.type}" + ("" if f.required else f", default: {f.default}")
        lines.append(f'        {f.name}=raw["TODO"],{hint}')
    lines += [
        "    )",
        "",
        "",
        "def part_filter(part: str) -> bool:",
        "    # Keep only the parts sample_loader reads, so the others are not decoded.",
        f"    return part in {tuple(sorted(parts))!r}",
        "",
    ]
    return "\n".join(lines).encode()
