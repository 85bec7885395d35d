"""Turn the parts of one sample into a sample object, the way its dataset.yaml says.

Three kinds of dataset.yaml: a typed sample (`sample_type` + `field_map`), `CrudeWebdataset` (part dict handed to
a cooker chosen by subflavors), and the legacy `sample_loader: file.py:function` (+ optional `part_filter`), whose
code runs only for local datasets or with `trust_remote_code=True`.
"""

from __future__ import annotations

import itertools
import types
from typing import Any

import numpy as np

from energon_arrow.adapters import Storage
from energon_arrow.epathlib import EPath
from energon_arrow.loader.errors import LoaderError
from energon_arrow.loader.split_rows import positions_of
from energon_arrow.meta import DatasetYaml
from energon_arrow.samples.decoders import PartDecoder
from energon_arrow.samples.fieldmap import FieldMap
from energon_arrow.samples.sample import SourceInfo
from energon_arrow.samples.types import CrudeSample, required_fields, resolve_sample_type, sample_fields

DATASET_YAML = ".nv-meta/dataset.yaml"  # for messages


def load_dataset_code(storage: Storage, spec: str, trust_remote_code: bool, where: str):
    """`file.py:function` next to dataset.yaml -> the function. Remote code runs only when trusted."""
    if not isinstance(spec, str) or ":" not in spec:
        raise LoaderError(f"{where}: expected 'file.py:function', got {spec!r}")
    file, func = spec.rsplit(":", 1)
    rel = f".nv-meta/{file}"
    if not storage.is_local and not trust_remote_code:
        raise LoaderError(
            f"{storage.url_of(rel)}: dataset ships code ({spec}); remote code is not executed unless you pass "
            f"trust_remote_code=True"
        )
    source = storage.read_text(rel)
    module = types.ModuleType(f"energon_arrow_dataset_code_{abs(hash(storage.url_of(rel)))}")
    module.__file__ = storage.url_of(rel)
    exec(compile(source, storage.url_of(rel), "exec"), module.__dict__)
    if not hasattr(module, func):
        raise LoaderError(f"{storage.url_of(rel)}: defines no function {func!r}")
    return getattr(module, func)


class SampleBuilder:
    """Builds one sample from (key, parts) for a given dataset.yaml; decoding happens here, per needed part."""

    #: the split position of the source's row 0 (`SplitSource.row_offset`, set by `SplitSource.new_builder`):
    #: added to the rows given as `split_index` to make energon's `SourceInfo.index`
    index_offset = 0
    #: the source's excluded samples in energon's index space (`SplitSource.excluded`): energon's index of a row
    #: counts them (None: none)
    index_gaps = None

    def __init__(
        self,
        storage: Storage,
        config: DatasetYaml,
        decoder: PartDecoder,
        subflavors: dict | None = None,
        trust_remote_code: bool = False,
    ):
        self.where = (
            config.where if config.key_lines else storage.url_of(DATASET_YAML)
        )  # the file it was read from
        self.dataset_path = EPath(storage.url)  # energon's SourceInfo.dataset_path: one EPath per dataset
        self.decoder = decoder
        self.subflavors = {**(config.subflavors or {}), **(subflavors or {})}  # energon: {} when none
        self.field_map = None
        self.sample_loader = None
        self.part_filter = None
        if config.crude:
            self.sample_cls = CrudeSample
            self.part_filter = _crude_part_filter(config.part_filter, self.where)
        else:
            where = config.locate("sample_type") if config.key_lines else self.where
            self.sample_cls = resolve_sample_type(config.sample_type, config.sample_type_module, where)
            if config.sample_loader:
                self.sample_loader = load_dataset_code(
                    storage, config.sample_loader, trust_remote_code, self.where
                )
                if config.part_filter:
                    self.part_filter = load_dataset_code(
                        storage, config.part_filter, trust_remote_code, self.where
                    )
            else:
                self.field_map = FieldMap(config.field_map or {}, self.where)
                self.field_map.check_fields(
                    self.sample_cls, sample_fields(self.sample_cls), required_fields(self.sample_cls)
                )
        self.crude = self.sample_cls is CrudeSample

    def _decode(self, part: str, data, shard: str, key: str, seed: int | None) -> Any:
        from energon_arrow.loader.errors import DecodeError

        try:
            return self.decoder.decode_part(part, data, seed)
        except Exception as exc:
            raise DecodeError(shard, key, part, exc) from exc

    def sources(self, keys: list, part_names, shards: list, split_indices: list) -> list[tuple[SourceInfo]]:
        """energon's `__sources__` of samples read from shards (one tuple per sample): their positions in the
        split (`split_indices`: rows of the source, shifted by `index_offset`) and the member names of
        `part_names`."""
        root = self.dataset_path
        if self.index_gaps is not None:
            rows = np.asarray(split_indices, np.int64)
            split_indices = (positions_of(self.index_gaps, rows) + self.index_offset).tolist()
        elif self.index_offset:
            split_indices = [i + self.index_offset for i in split_indices]
        # the member names column by column, zipped into one tuple per sample; tuple.__new__ skips the named
        # tuple's Python __new__ (half the time of SourceInfo(...) for a batch)
        names = [[key + "." + p for key in keys] for p in part_names]
        files = zip(*names) if names else itertools.repeat(())
        new = tuple.__new__
        return [
            (new(SourceInfo, (root, index, shard, file_names)),)
            for shard, index, file_names in zip(shards, split_indices, files)
        ]

    def build(
        self, key: str, parts: dict, shard: str, sample_index: int, split_index: int, seed: int | None = None
    ) -> Any:
        """The sample `key` (the `sample_index`-th of `shard`, the `split_index`-th of the split) from its parts;
        `seed`: its position seed (random image crops)."""
        restore = ("Webdataset", shard, int(sample_index))
        if self.field_map is not None:
            chosen = self.field_map.choose(parts, shard, key)
            decoded: dict[str, Any] = {}
            fields = {}
            for name, ref in chosen.items():
                if ref.part not in decoded:
                    decoded[ref.part] = self._decode(ref.part, parts[ref.part], shard, key, seed)
                fields[name] = ref.resolve(decoded[ref.part], shard, key) if ref.path else decoded[ref.part]
            return self.sample_cls(
                __key__=key,
                __restore_key__=restore,
                __subflavors__=dict(self.subflavors),
                __sources__=self.sources(
                    [key], [p for p in parts if p in self.field_map.parts], [shard], [split_index]
                )[0],
                **fields,
            )
        raw = {
            part: self._decode(part, data, shard, key, seed)
            for part, data in parts.items()
            if self.part_filter is None or self.part_filter(part)
        }
        raw.update(
            __key__=key,
            __restore_key__=restore,
            __subflavors__=dict(self.subflavors),
            __sources__=self.sources([key], raw, [shard], [split_index])[0],
        )
        if self.crude:
            return CrudeSample(raw)
        fields = self.sample_loader(raw)
        if not isinstance(fields, dict):
            raise LoaderError(
                f"{self.where}: sample_loader returned {type(fields).__name__}, expected a dict"
            )
        fields.setdefault("__key__", key)
        fields.setdefault("__restore_key__", restore)
        fields.setdefault("__subflavors__", dict(self.subflavors))
        fields.setdefault("__sources__", raw["__sources__"])
        try:
            return self.sample_cls(**fields)
        except TypeError as exc:
            raise LoaderError(
                f"{self.where}: sample_loader output does not fit {self.sample_cls.__name__}: {exc}"
            ) from None


def _crude_part_filter(spec, where: str):
    if spec is None:
        return None
    if isinstance(spec, str):
        spec = [spec]
    if isinstance(spec, list) and all(isinstance(s, str) for s in spec):
        wanted = frozenset(spec)
        return lambda part: part in wanted or part.rsplit(".", 1)[-1] in wanted
    raise LoaderError(f"{where}: part_filter must be a part name or a list of part names, got {spec!r}")
