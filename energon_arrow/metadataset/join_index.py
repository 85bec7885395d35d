"""energon's join indexes of a metadataset's `join:` entries: the cache file name energon gives each join
(`join_index_name`, a hash of the joined datasets' index uuids, sample excludes and nonmatch rules), the check
that a join was prepared before it loads (`check_join_prepared`, used by the loader's joined source) and writing
one into `<metadataset>.cache/` (`write_join_index`, byte-identical to energon's, used by `prepare_metadataset`).
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Callable

from energon_arrow.adapters import open_storage
from energon_arrow.loader.errors import LoaderError
from energon_arrow.metadataset.tree import Leaf


def join_members(leaf: Leaf) -> list:
    members = leaf.join.members
    return list(members.values()) if isinstance(members, dict) else list(members)


def join_index_name(leaf: Leaf, storage_options: dict | None) -> tuple[str, bool]:
    """energon's cache file name for a join: a hash of each member's index uuid, sample excludes and nonmatch;
    and whether the name depends on the process (energon hashes a set of excludes in its iteration order, which
    follows Python's per-process string hashing once a member has two or more sample excludes)."""
    from energon_arrow.meta import read_split

    digest = hashlib.sha256()
    order_dependent = False
    for m in join_members(leaf):
        storage = open_storage(m.path, storage_options)
        split = read_split(storage, m.split_config or "split.yaml").expanded()
        digest.update(b"\0uuid=")
        digest.update(storage.read_text(".nv-meta/index.uuid").encode())
        digest.update(b"\0excludes=")
        excludes = split.energon_sample_excludes()  # hashed in energon's order
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
    name depends on the process that prepared it (see `join_index_name`)."""
    base, name = posixpath.split(leaf.join.mds_path)
    folder = open_storage(base or ".", storage_options)
    cache = f"{name}.cache"
    target, order_dependent = join_index_name(leaf, storage_options)
    if folder.exists(f"{cache}/{target}"):
        return
    if order_dependent and folder.isdir(cache):
        want = index_bytes()
        for info in folder.scan(f"{cache}/join_index_*.bin"):
            if info.size == len(want) and folder.read_bytes(info.path) == want:
                return
    raise LoaderError(
        f"{leaf.join.mds_path}: the join of {[m.path for m in join_members(leaf)]} has no join index "
        f"{folder.url_of(cache)}/{target}: run prepare_metadataset (energon prepare) on the metadataset; "
        "if it was prepared, the joined datasets or their nonmatch/split config changed since"
    )


def write_join_index(leaf: Leaf, storage_options: dict | None) -> tuple[str, str]:
    from energon_arrow.query import open_dataset
    from energon_arrow.query.join import JoinMember, join_datasets, join_index_bytes

    base, name = posixpath.split(leaf.join.mds_path)
    folder = open_storage(base or ".", storage_options)
    cache, (target, _) = f"{name}.cache", join_index_name(leaf, storage_options)
    rel = f"{cache}/{target}"
    if folder.exists(rel):
        return folder.url_of(cache), target
    members = {f"d{i}": m for i, m in enumerate(join_members(leaf))}
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
