"""energon's metadataset helpers: `traverse_metadataset` and `prepare_metadataset` (energon 7.4.1 names).

`traverse_metadataset(path, split_part=...)` lists the leaf datasets of one split (nested metadatasets followed)
with their effective split part, aux references and subflavors, without opening them; like energon it refuses
`join:` splits. `prepare_metadataset(path)` checks every split's datasets and aux datasets exist and are prepared,
and writes energon's join index for each `join:` into `<metadataset>.cache/` (byte-identical to energon's, so
energon loads the joins too; energon-arrow's loader, like energon's, refuses a join whose index is missing or
stale), removing stale join indexes.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any

from energon_arrow.adapters import open_storage
from energon_arrow.epathlib import EPath
from energon_arrow.loader.errors import LoaderError
from energon_arrow.metadataset.join_index import join_members, write_join_index
from energon_arrow.metadataset.tree import Leaf, MdsFile, is_metadataset, resolve_split

_FILESYSTEM = "filesystem://"


@dataclass
class TraversedDatasetReference:
    """One leaf dataset of a traversed metadataset split (energon's fields: `path` and the `aux` values are
    `EPath`s carrying the caller's storage options)."""

    path: EPath
    split_part: str
    aux: dict[str, EPath] = field(default_factory=dict)
    subflavors: dict[str, Any] = field(default_factory=dict)


def _leaves(path: str, split_part: str, storage_options: dict | None) -> list[Leaf]:
    if not is_metadataset(str(path)):
        raise LoaderError(f"{path}: traverse_metadataset only supports metadatasets (a .yaml file)")
    return resolve_split(str(path), split_part, None, storage_options).leaves


def traverse_metadataset(
    path, *, split_part: str, storage_options: dict | None = None
) -> list[TraversedDatasetReference]:
    """The flattened leaf datasets of `split_part` in the metadataset at `path`."""
    out = []
    for leaf in _leaves(path, split_part, storage_options):
        if leaf.join is not None:
            raise LoaderError(
                f"{path}: split {split_part!r}: traverse_metadataset() does not support joined datasets"
            )
        aux = {
            k: EPath(v[len(_FILESYSTEM) :] if v.startswith(_FILESYSTEM) else v, storage_options)
            for k, v in leaf.aux.items()
        }
        out.append(
            TraversedDatasetReference(
                EPath(leaf.path, storage_options), leaf.split_part, aux, dict(leaf.subflavors or {})
            )
        )
    return out


def _check_prepared(leaf: Leaf, storage_options: dict | None, where: str) -> None:
    from energon_arrow.index.jsonl_index import index_name
    from energon_arrow.meta import info_exists

    refs = [leaf.path] if leaf.join is None else [m.path for m in join_members(leaf)]
    refs += [ref for ref in leaf.aux.values() if not ref.startswith(_FILESYSTEM)]
    for ref in refs:
        if ref.endswith(".jsonl"):
            base, name = posixpath.split(ref)
            if not open_storage(base or ".", storage_options).exists(index_name(name)):
                raise LoaderError(f"{where}: JSONL dataset {ref} has no {index_name(name)}; prepare it first")
        elif not info_exists(open_storage(ref, storage_options)):
            raise LoaderError(
                f"{where}: {ref} is not a prepared dataset (no .nv-meta/.info.json); prepare it first"
            )


def prepare_metadataset(path, storage_options: dict | None = None) -> list[str]:
    """Check every split of the metadataset at `path` and write the join indexes energon needs; returns the
    join index files in use."""
    doc = MdsFile(str(path), storage_options)
    splits = doc.data.get("splits") if isinstance(doc.data, dict) else None
    if not isinstance(splits, dict) or not splits:
        raise LoaderError(f"{doc.where}: a metadataset needs 'splits'")
    written: dict[str, set[str]] = {}
    for split in splits:
        for leaf in resolve_split(str(path), str(split), None, storage_options).leaves:
            _check_prepared(leaf, storage_options, f"{doc.where}: split {split!r}")
            if leaf.join is not None:
                cache, target = write_join_index(leaf, storage_options)
                written.setdefault(cache, set()).add(target)
    top = open_storage(posixpath.dirname(str(path)) or ".", storage_options)
    written.setdefault(top.url_of(posixpath.basename(str(path)) + ".cache"), set())
    for cache, keep in written.items():
        store = open_storage(cache, storage_options)
        if store.isdir():
            for stale in store.list_files("join_index_*.bin"):
                if posixpath.basename(stale) not in keep:
                    store.remove(stale)
    return sorted(f"{cache}/{t}" for cache, keep in written.items() for t in keep)
