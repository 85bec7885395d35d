"""dataset.yaml `field_map`: sample field -> part, with `json[key][0]` access and `a,b` alternatives."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from energon_arrow.loader.errors import LoaderError, MissingPartError

_ACCESS = re.compile(r"\[([^\]]*)\]")


@dataclass(frozen=True)
class PartRef:
    """One alternative of a field map value: a part name plus an access path into its decoded value."""

    part: str
    path: tuple[str | int, ...] = ()

    @staticmethod
    def parse(text: str, where: str) -> PartRef:
        text = text.strip()
        bracket = text.find("[")
        if bracket < 0:
            if not text:
                raise LoaderError(f"{where}: empty part name in field map")
            return PartRef(text)
        part, rest = text[:bracket], text[bracket:]
        keys = _ACCESS.findall(rest)
        if not part or "".join(f"[{k}]" for k in keys) != rest:
            raise LoaderError(f"{where}: malformed field map access {text!r} (expected part[key][0]...)")
        return PartRef(part, tuple(int(k) if k.lstrip("-").isdigit() else k.strip("'\"") for k in keys))

    def resolve(self, value: Any, shard: str, key: str) -> Any:
        for step in self.path:
            try:
                value = value[step]
            except (KeyError, IndexError, TypeError) as exc:
                raise MissingPartError(
                    f"{shard}: sample {key!r}: part {self.part!r} has no element {step!r} "
                    f"(field map access {self.text()}): {exc!r}"
                ) from None
        return value

    def text(self) -> str:
        return self.part + "".join(f"[{s}]" for s in self.path)


class FieldMap:
    """Maps part dicts to sample fields. `parts` is the set of part names any alternative may read."""

    def __init__(self, mapping: dict[str, str], where: str = "dataset.yaml"):
        if not isinstance(mapping, dict) or not mapping:
            raise LoaderError(f"{where}: field_map must be a non-empty mapping of field -> part")
        self.where = where
        self.fields: dict[str, tuple[PartRef, ...]] = {}
        for name, spec in mapping.items():
            if not isinstance(spec, str):
                raise LoaderError(f"{where}: field_map[{name!r}] must be a string, got {spec!r}")
            self.fields[name] = tuple(PartRef.parse(alt, where) for alt in spec.split(","))
        self.parts = frozenset(ref.part for refs in self.fields.values() for ref in refs)

    def check_fields(self, sample_cls: type, known: list[str], required: tuple[str, ...]) -> None:
        unknown = sorted(set(self.fields) - set(known))
        if unknown:
            raise LoaderError(
                f"{self.where}: field_map names fields {unknown} that {sample_cls.__name__} does not have "
                f"(fields: {known})"
            )
        missing = sorted(set(required) - set(self.fields))
        if missing:
            raise LoaderError(
                f"{self.where}: field_map lacks required {sample_cls.__name__} fields {missing}"
            )

    def choose(self, available, shard: str, key: str) -> dict[str, PartRef]:
        """For each field the first alternative whose part the sample has."""
        chosen = {}
        for name, refs in self.fields.items():
            for ref in refs:
                if ref.part in available:
                    chosen[name] = ref
                    break
            else:
                wanted = ",".join(r.part for r in refs)
                raise MissingPartError(
                    f"{shard}: sample {key!r}: field {name!r} maps to part {wanted!r}, but the sample has only "
                    f"parts {sorted(available)}"
                )
        return chosen
