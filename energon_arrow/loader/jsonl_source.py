"""Crude `.jsonl` datasets (energon's JSONL flavor) as loader sources.

The file is one "shard" whose samples are the byte ranges of its `.jsonl.idx` index (see index/jsonl_index.py);
sample i has key `str(i)` and one part, `json`, which is always parsed (energon parses JSONL samples whatever
the decoder). Samples are crude: a task encoder's cookers turn them into typed samples. The index arrays are
numpy (8 bytes per sample per column, memory-mapped like every split table), never Python lists.
"""

from __future__ import annotations

import json
import posixpath

import numpy as np
import pyarrow as pa

from energon_arrow.adapters import open_storage
from energon_arrow.index.jsonl_index import JsonlIndexError, read_jsonl_index
from energon_arrow.loader.builder import SampleBuilder
from energon_arrow.loader.errors import DecodeError, LoaderError
from energon_arrow.loader.source import SplitSource, map_index
from energon_arrow.meta import DatasetYaml
from energon_arrow.samples import CrudeSample, SourceInfo


class JsonlBuilder(SampleBuilder):
    """Crude samples of a JSONL file with energon's keys: `__key__` (the line's sample number), `__shard__` (the
    file name), `__restore_key__`, `__subflavors__` (None unless the metadataset gives some, as in energon's
    JSONL factory), `__sources__` naming the file, and `json` parsed."""

    def __init__(
        self, storage, config, decoder, subflavors: dict | None = None, trust_remote_code: bool = False
    ):
        super().__init__(storage, config, decoder, subflavors, trust_remote_code)
        self.given_subflavors = subflavors

    def build(
        self, key: str, parts: dict, shard: str, sample_index: int, split_index: int, seed: int | None = None
    ) -> CrudeSample:
        return CrudeSample(
            __key__=key,
            __shard__=shard,
            __restore_key__=("Webdataset", shard, int(sample_index)),
            __sources__=self.sources([key], ("json",), [shard], [split_index])[0],
            __subflavors__=None if self.given_subflavors is None else dict(self.subflavors),
            json=self._decode("json", parts["json"], shard, key, seed),
        )

    def _decode(self, part: str, data, shard: str, key: str, seed: int | None = None):
        try:
            return json.loads(bytes(data))
        except ValueError as exc:
            raise DecodeError(shard, key, part, exc) from exc

    def sources(self, keys: list, part_names, shards: list, split_indices: list) -> list[tuple[SourceInfo]]:
        return [
            (SourceInfo(str(self.dataset_path).rstrip("/") + "/" + shard, int(key), shard, (f"{key}.json",)),)
            for key, shard in zip(keys, shards)
        ]


def open_jsonl(path: str, storage_options: dict | None = None, subflavors: dict | None = None) -> SplitSource:
    """The samples of a prepared `.jsonl` file (its `.jsonl.idx` must exist and match the file's size)."""
    base, name = posixpath.split(str(path).rstrip("/"))
    storage = open_storage(base or ".", storage_options)
    try:
        offsets = read_jsonl_index(storage, name)
    except JsonlIndexError as exc:
        raise LoaderError(str(exc)) from None
    except FileNotFoundError:
        raise LoaderError(f"{storage.url_of(name)}: JSONL dataset not found") from None
    n = len(offsets) - 1
    sizes = np.diff(offsets)
    src = SplitSource(
        storage=storage,
        shard_paths=[name],
        shard_id=np.zeros(n, np.int32),
        sample_index=np.arange(n, dtype=np.int64),
        byte_offset=offsets[:-1],
        byte_size=sizes,
        keys=pa.array(np.arange(n, dtype=np.int64)).cast(pa.large_string()),
        config=DatasetYaml(crude=True),
        subflavors=subflavors,
        name=storage.url_of(name),
        parts={"json": (np.zeros(n, np.int64), sizes)},
        builder=JsonlBuilder,
    )
    return map_index(src)
