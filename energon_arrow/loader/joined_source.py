"""`join:` metadatasets in the loader: samples of several prepared datasets joined by sample key.

As in energon, a join loads only after `prepare_metadataset` wrote its join index for exactly these datasets
(`check_join_prepared`; the rows themselves come from the query, not from that file). Which rows exist and which
members match is decided by the query layer's `join_datasets` (energon's nonmatch
rules: `skip` drops the row, `none` passes None, `error` fails naming the first missing key). The joined source
is the primary's split restricted to the joined rows (then `subset:` applies to the joined rows, as in energon);
for each other member an int64 array gives its row per joined row (-1: no match). `JoinedBuilder` builds the
primary's sample and each member's sample (each with its own dataset.yaml) and hands them to the joiner: a sample
type (`Type.from_joined`) or a callable, positionally for a `join:` list, by name for a `join:` mapping.
The members' samples of a batch are read together before the batch is built (`prefetch_batch`: per member one
coalesced read of its rows, so nearby samples share a request and a remote member's requests run concurrently).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from energon_arrow.loader.assemble import located_samples, sample_parts
from energon_arrow.loader.batch_columns import SourceColumns
from energon_arrow.loader.builder import SampleBuilder
from energon_arrow.loader.errors import SYSTEM_EXCEPTIONS, JoinerError, LoaderError
from energon_arrow.loader.reader import SampleReader
from energon_arrow.loader.source import SplitSource, map_index, open_split
from energon_arrow.metadataset.join_index import check_join_prepared
from energon_arrow.metadataset.tree import JoinMember, Leaf


def take_rows(src: SplitSource, rows: np.ndarray) -> SplitSource:
    """The rows `rows` (in that order) of a source's table."""
    rows = np.asarray(rows, np.int64)
    return dataclasses.replace(
        src,
        shard_id=np.asarray(src.shard_id[rows]),
        sample_index=np.asarray(src.sample_index[rows]),
        byte_offset=np.asarray(src.byte_offset[rows]),
        byte_size=np.asarray(src.byte_size[rows]),
        keys=None if src.keys is None else src.keys.take(pa.array(rows)),
        parts=None
        if src.parts is None
        else {k: (np.asarray(o[rows]), np.asarray(z[rows])) for k, (o, z) in src.parts.items()},
        _key_maps=[],
        rowmap=None,
        excluded=None,  # the taken rows are their own index space (energon's join drops excluded samples)
        cut_at_shards=False,  # energon slices a join's rows without regard to shards
    )


def resolve_joiner(spec: dict, where: str) -> Any:
    """A `joiner:` of a join: `{__module__, __class__}` names a sample type (energon's or a module's class),
    `{__module__, __function__}` a callable. A module that does not import falls back to energon's names, as in
    energon's typed converter."""
    from energon_arrow.samples.types import SAMPLE_TYPES, resolve_sample_type

    module = str(spec.get("__module__", "megatron.energon"))
    kind = "__class__" if "__class__" in spec else "__function__"
    name = str(spec[kind])
    if kind == "__class__" and (module == "megatron.energon" or module.startswith("megatron.energon.")):
        return resolve_sample_type(name, module, where)
    from energon_arrow.samples.user_classes import import_named, module_exists

    try:
        found = import_named(module, name, f"{where}: joiner")
    except LoaderError:
        if kind == "__class__" and name in SAMPLE_TYPES and not module_exists(module):
            return SAMPLE_TYPES[name]
        raise
    if not callable(found):
        raise LoaderError(f"{where}: joiner {module}.{name} is not a class or function, got {found!r}")
    return found


def _row_of(keys: pa.Array, src: SplitSource) -> np.ndarray:
    """Row of each key in `src`'s table (-1 when absent)."""
    idx = pc.index_in(keys, value_set=src.keys.cast(keys.type))
    return pc.fill_null(idx, -1).to_numpy(zero_copy_only=False).astype(np.int64)


def open_joined(leaf: Leaf, storage_options: dict | None = None) -> SplitSource:
    from energon_arrow.query import open_dataset
    from energon_arrow.query.join import JoinMember as QueryMember
    from energon_arrow.query.join import join_datasets, join_index_bytes

    spec = leaf.join
    named = isinstance(spec.members, dict)
    items: list[tuple[str, JoinMember]] = (
        list(spec.members.items()) if named else [(f"d{i}", m) for i, m in enumerate(spec.members)]
    )
    opened, members = [], {}
    try:
        for name, m in items:
            ds = open_dataset(m.path, storage_options, split_config=m.split_config or "split.yaml")
            opened.append(ds)
            members[name] = QueryMember(ds, m.nonmatch, m.split_part)
        joined = join_datasets(members, leaf.split_part)
    except ValueError as exc:
        raise LoaderError(f"join of {[m.path for _, m in items]}: {exc}") from None
    finally:
        for ds in opened:
            ds.close()
    check_join_prepared(leaf, lambda: join_index_bytes(joined, [name for name, _ in items]), storage_options)
    keys = joined["sample_key"].combine_chunks()
    srcs = [
        open_split(
            m.path,
            m.split_part or leaf.split_part,
            storage_options,
            {**(m.subflavors or {}), **(leaf.subflavors or {})},
            dataset_yaml=m.dataset_config or "dataset.yaml",
            split_config=m.split_config or "split.yaml",
        )
        for _, m in items
    ]
    primary = take_rows(srcs[0], _row_of(keys, srcs[0]))
    rows = []
    for (name, _), src in zip(items[1:], srcs[1:]):
        r = _row_of(keys, src)
        r[~joined[f"{name}_matched"].to_numpy(zero_copy_only=False).astype(bool)] = -1
        rows.append(r)
    if leaf.subset is not None:
        start, end = leaf.subset.bounds(len(primary), primary.name)
        primary = primary.subset(start, end)
        rows = [r[start:end] for r in rows]
    primary.subflavors = leaf.subflavors
    primary.name = f"join of {', '.join(m.path for _, m in items)} split {leaf.split_part!r}"
    primary.builder = functools.partial(
        JoinedBuilder,
        members=list(zip(srcs[1:], rows)),
        joiner=resolve_joiner(spec.joiner, primary.name),
        names=[name for name, _ in items] if named else None,
    )
    return map_index(primary)


class JoinedBuilder(SampleBuilder):
    """The joined sample of a row: the primary's sample and each member's (None where unmatched), joined."""

    def __init__(self, storage, config, decoder, subflavors, trust_remote_code, *, members, joiner, names):
        self.primary = SampleBuilder(storage, config, decoder, subflavors, trust_remote_code)
        super().__init__(storage, config, decoder, subflavors, trust_remote_code)
        self.field_map = None  # never column-wise: every sample is joined
        self.members = [
            (src, rows, SampleBuilder(src.storage, src.config, decoder, src.subflavors, trust_remote_code))
            for src, rows in members
        ]
        self.readers: list[SampleReader] | None = None  # opened in the process that reads
        self._batch_views: list[dict[int, Any]] = [
            {} for _ in self.members
        ]  # the batch's member rows: views or located
        if isinstance(joiner, type) and hasattr(joiner, "from_joined"):
            joiner = joiner.from_joined
        self.joiner, self.names = joiner, names

    @property
    def index_offset(self) -> int:  # the joined rows' split position: every member's SourceInfo.index
        return self.primary.index_offset

    @index_offset.setter
    def index_offset(self, value: int) -> None:
        self.primary.index_offset = value
        for _src, _rows, builder in getattr(self, "members", ()):
            builder.index_offset = value

    def _open_readers(self) -> list[SampleReader]:
        if self.readers is None:
            self.readers = [SampleReader(s) for s, _, _ in self.members]
        return self.readers

    def prefetch_batch(self, rows: np.ndarray) -> None:
        """Read the members' samples of a batch's joined rows at once, one coalesced read per member (nearby
        samples in one request, the requests of a remote member concurrent) instead of one read per sample."""
        readers = self._open_readers()
        for i, (src, member_rows, _) in enumerate(self.members):
            need = np.unique(member_rows[rows])
            need = need[need >= 0]
            if not need.size:
                self._batch_views[i] = {}
                continue
            views = readers[i].read(need)
            located = located_samples(SourceColumns(src), need, views)  # each index column gathered once
            self._batch_views[i] = dict(zip(need.tolist(), views if located is None else located))

    def _member(self, i: int, row: int, seed: int | None) -> Any:
        """Member i's sample of joined row `row`; its SourceInfo.index is the joined row's, as in energon (whose
        join index gives every member the row's position)."""
        src, rows, builder = self.members[i]
        r = int(rows[row])
        if r < 0:
            return None
        got = self._batch_views[i].get(r)
        if isinstance(got, tuple):  # located_samples' (key, parts, shard, sample index)
            return builder.build(*got, row, seed)
        if got is None:  # a sample built outside a batch (restore_sample)
            (got,) = self._open_readers()[i].read(np.array([r], np.int64))
        key, parts = sample_parts(src, r, got)
        return builder.build(
            key, parts, src.shard_paths[src.shard_id[r]], int(src.sample_index[r]), row, seed
        )

    def build(
        self, key: str, parts: dict, shard: str, sample_index: int, split_index: int, seed: int | None = None
    ) -> Any:
        samples = [
            self.primary.build(key, parts, shard, sample_index, split_index, seed),
            *(self._member(i, split_index, seed) for i in range(len(self.members))),
        ]
        try:
            if self.names is None:
                return self.joiner(*samples)
            return self.joiner(**dict(zip(self.names, samples)))
        except SYSTEM_EXCEPTIONS:
            raise
        except Exception as exc:  # a sample that does not load: the loader's error policy (energon's handler)
            name = getattr(self.joiner, "__qualname__", repr(self.joiner))
            raise JoinerError(shard, key, name, exc) from exc
