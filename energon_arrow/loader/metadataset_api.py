"""energon's metadataset helpers: `traverse_metadataset` and `prepare_metadataset` (energon 7.4.1 names).

`traverse_metadataset(path, split_part=...)` lists the leaf datasets of one split (nested metadatasets followed)
with their effective split part, aux references and subflavors, without opening them; like energon it refuses
`join:` splits. `prepare_metadataset(path)` checks every split's datasets and aux datasets exist and are prepared,
and writes energon's join index for each `join:` into `<metadataset>.cache/` (byte-identical to energon's, so
energon loads the joins too; energon-arrow's loader, like energon's, refuses a join whose index is missing or
stale), removing stale join indexes.
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from energon_arrow.adapters import open_storage
from energon_arrow.epathlib import EPath
from energon_arrow.loader.errors import LoaderError
from energon_arrow.loader.mds_tree import Leaf, MdsFile, is_metadataset, resolve_split

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

    refs = [leaf.path] if leaf.join is None else [m.path for m in _members(leaf)]
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


def _members(leaf: Leaf) -> list:
    members = leaf.join.members
    return list(members.values()) if isinstance(members, dict) else list(members)


def _join_index_name(leaf: Leaf, storage_options: dict | None) -> tuple[str, bool]:
    """energon's cache file name for a join: a hash of each member's index uuid, sample excludes and nonmatch;
    and whether the name depends on the process (energon hashes a set of excludes in its iteration order, which
    follows Python's per-process string hashing once a member has two or more sample excludes)."""
    from energon_arrow.meta import read_split

    digest = hashlib.sha256()
    order_dependent = False
    for m in _members(leaf):
        storage = open_storage(m.path, storage_options)
        split = read_split(storage, m.split_config or "split.yaml").expanded()
        digest.update(b"\0uuid=")
        digest.update(storage.read_text(".nv-meta/index.uuid").encode())
        digest.update(b"\0excludes=")
        excludes = {e for e in split.exclude if "/" in e}  # a set, iterated like energon's
        order_dependent |= len(excludes) > 1
        for exclude in excludes:
            digest.update(exclude.encode())
            digest.update(b"\0")
        digest.update(f"\0nonmatch={m.nonmatch}\0".encode())
    return f"join_index_{digest.hexdigest()}.bin", order_dependent


def check_join_prepared(leaf: Leaf, index_bytes: Callable[[], bytes], storage_options: dict | None) -> None:
    """As in energon, a join loads only once `prepare_metadataset` wrote its join index for exactly these
    datasets (their index uuids, sample excludes and nonmatch rules); a join changed since is an error.
    `index_bytes()`: the join index of the current join, compared with the cached ones only when energon's file
    name depends on the process that prepared it (see `_join_index_name`)."""
    base, name = posixpath.split(leaf.join.mds_path)
    folder = open_storage(base or ".", storage_options)
    cache = f"{name}.cache"
    target, order_dependent = _join_index_name(leaf, storage_options)
    if folder.exists(f"{cache}/{target}"):
        return
    if order_dependent and folder.isdir(cache):
        want = index_bytes()
        for info in folder.scan(f"{cache}/join_index_*.bin"):
            if info.size == len(want) and folder.read_bytes(info.path) == want:
                return
    raise LoaderError(
        f"{leaf.join.mds_path}: the join of {[m.path for m in _members(leaf)]} has no join index "
        f"{folder.url_of(cache)}/{target}: run prepare_metadataset (energon prepare) on the metadataset; "
        "if it was prepared, the joined datasets or their nonmatch/split config changed since"
    )


def _write_join_index(leaf: Leaf, storage_options: dict | None) -> tuple[str, str]:
    from energon_arrow.query import open_dataset
    from energon_arrow.query.join import JoinMember, join_datasets, join_index_bytes

    base, name = posixpath.split(leaf.join.mds_path)
    folder = open_storage(base or ".", storage_options)
    cache, (target, _) = f"{name}.cache", _join_index_name(leaf, storage_options)
    rel = f"{cache}/{target}"
    if folder.exists(rel):
        return folder.url_of(cache), target
    members = {f"d{i}": m for i, m in enumerate(_members(leaf))}
    opened = {
        k: open_dataset(m.path, storage_options, split_config=m.split_config or "split.yaml")
        for k, m in members.items()
    }
    try:
        joined = join_datasets(
            {k: JoinMember(ds, members[k].nonmatch, members[k].split_part) for k, ds in opened.items()},
            leaf.split_part,
        )
        folder.write_atomic(rel, join_index_bytes(joined, list(members)))
    except ValueError as exc:
        raise LoaderError(f"{leaf.join.mds_path}: join: {exc}") from None
    finally:
        for ds in opened.values():
            ds.close()
    return folder.url_of(cache), target


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
                cache, target = _write_join_index(leaf, storage_options)
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
