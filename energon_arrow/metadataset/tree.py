"""Metadataset YAML (energon 7.4's `MetadatasetV2` and the older v1 `Metadataset`) resolved to its leaf datasets.

`resolve_split(path, split_part)` walks one split the way energon's `get_datasets` does and returns the blend mode
(`none`, `weight` for `blend:` / v1 `datasets:`, `repetitions` for `blend_epochized:`) and the flattened leaves,
each with its effective split part, subflavors (outer levels override inner ones), subset (energon's composition:
a leaf's absolute range first, then the relative ranges of the levels above, innermost first), aux stores,
weight (normalised per level and multiplied down) or repetitions (multiplied down) and, for `join:` entries, the
joined datasets. Nested metadatasets are followed (cycles are an error); every mapping is checked for unknown
keys, and errors name the file, the line and the key.
"""

from __future__ import annotations

import posixpath
import re
import warnings
from dataclasses import dataclass, field, replace

from energon_arrow.adapters import open_storage
from energon_arrow.loader.errors import LoaderError
from energon_arrow.loader.order import combine_multipliers
from energon_arrow.meta import MetaError
from energon_arrow.meta._yaml import YamlMap, parse_yaml_tracked
from energon_arrow.metadataset.subset import Subset, merge_subset, parse_subset

_TYPE = {"__module__", "__class__"}
_REF = {
    "path",
    "split_part",
    "subflavors",
    "shuffle_over_epochs_multiplier",
    "dataset_config",
    "split_config",
}
_V2_REF = _REF | {"aux", "subset"}
_V1_REF = _REF | {"subflavor", "weight"}
_JOIN = {"join", "joiner", "split_part", "subflavors", "shuffle_over_epochs_multiplier"}
_JOIN |= {"dataset_config", "split_config", "subset"}
_JOIN_MEMBER = _REF | {"nonmatch"}
_JOINER_NAME = {"__class__", "__function__"}
_JOINER_KEYS = {"__module__"} | _JOINER_NAME
_NONMATCH = ("skip", "none", "error")
_URL = re.compile(r"^(?P<protocol>[a-z][a-z0-9+.-]*)://(?P<path>.*)", re.IGNORECASE)


@dataclass
class JoinMember:
    path: str
    split_part: str | None = None
    subflavors: dict | None = None
    nonmatch: str = "error"
    dataset_config: str | None = None
    split_config: str | None = None


@dataclass
class JoinSpec:
    members: dict[str, JoinMember] | list[JoinMember]
    joiner: dict  # {__module__, __class__} (a sample type) or {__module__, __function__} (a callable)
    mds_path: str = ""  # the metadataset file that declares the join (energon keeps its join index beside it)


@dataclass
class Leaf:
    path: str  # absolute path / URL of a prepared dataset (or a .jsonl file)
    split_part: str
    subflavors: dict | None = None
    subset: Subset | None = None
    aux: dict[str, str] = field(default_factory=dict)  # name -> URL ("filesystem://..." for folders)
    weight: float | None = None
    repetitions: float | None = None
    dataset_config: str | None = None
    split_config: str | None = None
    join: JoinSpec | None = None
    shuffle_over_epochs: int | None = (
        1  # the references' shuffle_over_epochs_multiplier, combined (energon's rule)
    )


@dataclass
class ResolvedSplit:
    mode: str  # "none" | "weight" | "repetitions"
    leaves: list[Leaf]


def is_metadataset(path: str) -> bool:
    return str(path).endswith((".yaml", ".yml"))


def join_path(base: str, rel: str) -> str:
    """`rel` relative to the folder `base` (local path or URL); absolute paths and URLs stay as they are."""
    if "://" in rel or rel.startswith("/"):
        return rel
    if "://" not in base:
        return posixpath.normpath(posixpath.join(base, rel))
    scheme, _, rest = base.partition("://")
    return f"{scheme}://{posixpath.normpath(posixpath.join(rest, rel))}"


class MdsFile:
    """One metadataset file: its URL (for messages), its folder and its parsed content."""

    def __init__(self, path: str, storage_options: dict | None):
        base, name = posixpath.split(str(path).rstrip("/"))
        storage = open_storage(base or ".", storage_options)
        self.where = storage.url_of(name)
        self.path = str(path)
        self.folder = storage.url
        try:
            self.data = parse_yaml_tracked(storage.read_text(name), self.where)
        except MetaError as exc:  # names the line and column
            raise LoaderError(str(exc)) from None
        except FileNotFoundError:
            raise LoaderError(f"{self.where}: metadataset not found") from None

    def at(self, node, key=None) -> str:
        line = (
            node.line_of(key) if isinstance(node, YamlMap) and key is not None else getattr(node, "line", 0)
        )
        return f"{self.where}: line {line}" if line else self.where

    def check_keys(self, node, allowed: set, what: str) -> None:
        if not isinstance(node, dict):
            raise LoaderError(f"{self.at(node)}: {what} must be a mapping, got {node!r}")
        for key in node:
            if key not in allowed:
                raise LoaderError(
                    f"{self.at(node, key)}: unknown key {key!r} in {what} (allowed: {', '.join(sorted(allowed))})"
                )

    def mapping(self, node, key, what: str) -> dict | None:
        value = node.get(key)
        if value is not None and not isinstance(value, dict):
            raise LoaderError(f"{self.at(node, key)}: {what} {key!r} must be a mapping, got {value!r}")
        return value

    def string(self, node, key) -> str | None:
        """`node[key]` when set: a non-empty string (a path, split part or config file name)."""
        value = node.get(key)
        if value is not None and (not isinstance(value, str) or not value):
            raise LoaderError(f"{self.at(node, key)}: {key!r} must be a non-empty string, got {value!r}")
        return value

    def number(self, node, key, default: float) -> float:
        value = node.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise LoaderError(f"{self.at(node, key)}: {key} must be a number >= 0, got {value!r}")
        return value


class _Resolver:
    def __init__(self, storage_options: dict | None):
        self.storage_options = storage_options
        self.stack: list[str] = []

    # ---- files -------------------------------------------------------------------------------------------
    def split_of(self, path: str, split_part: str, subflavors, subset, where: str) -> ResolvedSplit:
        if path in self.stack:
            chain = " -> ".join([*self.stack[self.stack.index(path) :], path])
            raise LoaderError(f"{where}: metadataset cycle: {chain}")
        doc = MdsFile(path, self.storage_options)
        self.stack.append(path)
        try:
            return self._split(doc, split_part, subflavors, subset)
        finally:
            self.stack.pop()

    def _split(self, doc: MdsFile, split_part: str, subflavors, subset) -> ResolvedSplit:
        data = doc.data
        if not isinstance(data, dict):
            raise LoaderError(f"{doc.where}: a metadataset must be a mapping, got {type(data).__name__}")
        doc.check_keys(data, _TYPE | {"splits"}, "a metadataset")
        cls = data.get("__class__", "Metadataset")  # energon's default type is the v1 Metadataset
        if cls not in ("MetadatasetV2", "Metadataset"):
            raise LoaderError(f"{doc.at(data, '__class__')}: unknown metadataset class {cls!r}")
        module = data.get("__module__", "megatron.energon")
        if module != "megatron.energon":
            raise LoaderError(
                f"{doc.at(data, '__module__')}: expected __module__: megatron.energon, got {module!r}"
            )
        splits = doc.mapping(data, "splits", "metadataset") or {}
        if split_part not in splits:
            raise LoaderError(f"{doc.where}: no split {split_part!r} (splits: {sorted(map(str, splits))})")
        spec = splits[split_part]
        if cls == "Metadataset":
            doc.check_keys(spec, {"datasets"}, f"v1 split {split_part!r}")
            return self._v1_blend(doc, spec, split_part, subflavors, subset)
        return self._v2_node(doc, spec, split_part, subflavors, subset, f"split {split_part!r}")

    # ---- v2 ----------------------------------------------------------------------------------------------
    def _v2_node(self, doc, node, split_part, subflavors, subset, what, extra=frozenset()) -> ResolvedSplit:
        if not isinstance(node, dict):
            raise LoaderError(f"{doc.at(node)}: {what} must be a mapping, got {node!r}")
        for mode, key in (("weight", "blend"), ("repetitions", "blend_epochized")):
            if key in node:
                doc.check_keys(node, {key, "subset"} | set(extra), what)
                return self._blend(doc, node, key, mode, split_part, subflavors, subset)
        if "join" in node:
            doc.check_keys(node, _JOIN | set(extra), f"{what} (join)")
            return ResolvedSplit("none", [self._join(doc, node, split_part, subflavors, subset)])
        doc.check_keys(node, _V2_REF | set(extra), what)
        return self._reference(doc, node, split_part, subflavors, subset)

    def _blend(self, doc, node, key, mode, split_part, subflavors, subset) -> ResolvedSplit:
        items = node[key]
        if not isinstance(items, list) or not items:
            raise LoaderError(f"{doc.at(node, key)}: {key} must be a non-empty list")
        subset = merge_subset(parse_subset(node.get("subset"), doc.at(node, "subset")), subset, doc.at(node))
        own = "weight" if mode == "weight" else "repetitions"
        values = [doc.number(e, own, 1.0) if isinstance(e, dict) else 1.0 for e in items]
        total = sum(values)
        if mode == "weight" and total <= 0:
            raise LoaderError(f"{doc.at(node, key)}: blend weights are all 0")
        leaves = []
        for entry, value in zip(items, values):
            inner = self._v2_node(doc, entry, split_part, subflavors, subset, f"{key} entry", {own})
            leaves += _scaled(inner, mode, value / total if mode == "weight" else value, doc.at(entry))
        return ResolvedSplit(mode, leaves)

    def _reference(self, doc, node, split_part, subflavors, subset, v1=False) -> ResolvedSplit:
        if "path" not in node:
            raise LoaderError(f"{doc.at(node)}: a dataset reference needs a 'path'")
        multiplier = _multiplier(doc, node)
        own = doc.mapping(node, "subflavors", "dataset reference")
        if v1 and node.get("subflavor") is not None:  # energon's legacy single subflavor
            own = {"__subflavor__": node["subflavor"], **(own or {})}
        if own is not None:
            subflavors = {**own, **(subflavors or {})}  # outer levels override inner ones
        if not v1:
            subset = merge_subset(
                parse_subset(node.get("subset"), doc.at(node, "subset")), subset, doc.at(node)
            )
        path = join_path(doc.folder, doc.string(node, "path"))
        split = doc.string(node, "split_part") or split_part
        aux = _aux(doc, node, path)
        if is_metadataset(path):
            for key in ("aux", "dataset_config", "split_config"):
                if node.get(key) is not None:
                    raise LoaderError(f"{doc.at(node, key)}: {key!r} cannot be set on a nested metadataset")
            inner = self.split_of(path, split, subflavors, subset, doc.at(node, "path"))
            leaves = [
                replace(leaf, shuffle_over_epochs=combine_multipliers(leaf.shuffle_over_epochs, multiplier))
                for leaf in inner.leaves
            ]
            return ResolvedSplit(inner.mode, leaves)
        leaf = Leaf(
            path=path,
            split_part=split,
            subflavors=subflavors,
            subset=subset,
            aux=aux,
            dataset_config=doc.string(node, "dataset_config"),
            split_config=doc.string(node, "split_config"),
            shuffle_over_epochs=multiplier,
        )
        if subset is not None and subset.absolute is None and subset.range == (0.0, 1.0):
            leaf.subset = None
        return ResolvedSplit("none", [leaf])

    def _join(self, doc, node, split_part, subflavors, subset) -> Leaf:
        if _multiplier(doc, node) != 1:
            # energon 7.4.1 parses a join's own multiplier but loads the join with the outer one alone (its
            # MetadatasetJoin.get_datasets passes on its argument): so does energon-arrow, or the order would differ
            warnings.warn(
                f"{doc.at(node, 'shuffle_over_epochs_multiplier')}: shuffle_over_epochs_multiplier on a join has no "
                "effect (as in energon 7.4.1, which applies only the outer ones): set it on the reference to this "
                "metadataset or pass it to get_train_dataset",
                UserWarning,
                stacklevel=2,
            )
        for key in ("dataset_config", "split_config"):
            if node.get(key) is not None:
                raise LoaderError(
                    f"{doc.at(node, key)}: {key!r} cannot be set for joined datasets (as in energon)"
                )
        joiner = node.get("joiner")
        if not isinstance(joiner, dict) or len(_JOINER_NAME & set(joiner)) != 1:
            raise LoaderError(
                f"{doc.at(node, 'joiner') if 'joiner' in node else doc.at(node)}: a join needs a 'joiner': "
                "{__module__, __class__} (a sample type) or {__module__, __function__} (a callable)"
            )
        if "__function__" in joiner and "__module__" not in joiner:
            raise LoaderError(f"{doc.at(node, 'joiner')}: a joiner '__function__' needs its '__module__'")
        doc.check_keys(joiner, _JOINER_KEYS, "joiner")
        raw = node["join"]
        if isinstance(raw, dict):
            members: dict | list = {str(k): self._join_member(doc, v) for k, v in raw.items()}
        elif isinstance(raw, list) and raw:
            members = [self._join_member(doc, v) for v in raw]
        else:
            raise LoaderError(f"{doc.at(node, 'join')}: join must be a non-empty list or mapping of datasets")
        own = doc.mapping(node, "subflavors", "join")
        if own is not None:
            subflavors = {**own, **(subflavors or {})}
        subset = merge_subset(parse_subset(node.get("subset"), doc.at(node, "subset")), subset, doc.at(node))
        return Leaf(
            path=(members[0] if isinstance(members, list) else next(iter(members.values()))).path,
            split_part=doc.string(node, "split_part") or split_part,
            subflavors=subflavors,
            subset=subset,
            join=JoinSpec(members, dict(joiner), doc.path),
        )

    def _join_member(self, doc, node) -> JoinMember:
        doc.check_keys(node, _JOIN_MEMBER, "join entry")
        if "path" not in node:
            raise LoaderError(f"{doc.at(node)}: a join entry needs a 'path'")
        _check_shuffle_multiplier(doc, node)
        path = join_path(doc.folder, doc.string(node, "path"))
        if is_metadataset(path) or path.endswith(".jsonl"):
            raise LoaderError(
                f"{doc.at(node, 'path')}: only prepared webdatasets can be joined, not {path!r}"
            )
        nonmatch = node.get("nonmatch", "error")
        if nonmatch not in _NONMATCH:
            raise LoaderError(
                f"{doc.at(node, 'nonmatch')}: nonmatch must be one of {_NONMATCH}, got {nonmatch!r}"
            )
        return JoinMember(
            path=path,
            split_part=doc.string(node, "split_part"),
            subflavors=doc.mapping(node, "subflavors", "join entry"),
            nonmatch=nonmatch,
            dataset_config=doc.string(node, "dataset_config"),
            split_config=doc.string(node, "split_config"),
        )

    # ---- v1 ----------------------------------------------------------------------------------------------
    def _v1_blend(self, doc, node, split_part, subflavors, subset) -> ResolvedSplit:
        items = node.get("datasets")
        if not isinstance(items, list) or not items:
            raise LoaderError(f"{doc.at(node, 'datasets')}: datasets must be a non-empty list")
        for entry in items:
            doc.check_keys(entry, _V1_REF, "v1 dataset reference")
        values = [doc.number(e, "weight", 1.0) for e in items]
        total = sum(values)
        if total <= 0:
            raise LoaderError(f"{doc.at(node, 'datasets')}: blend weights are all 0")
        leaves = []
        for entry, value in zip(items, values):
            inner = self._reference(doc, entry, split_part, subflavors, subset, v1=True)
            leaves += _scaled(inner, "weight", value / total, doc.at(entry))
        return ResolvedSplit("weight", leaves)


def _scaled(inner: ResolvedSplit, mode: str, factor: float, where: str) -> list[Leaf]:
    """The leaves of an inner level inside a blend of `mode`, their weight / repetitions multiplied by factor."""
    if inner.mode not in ("none", mode):
        raise LoaderError(
            f"{where}: cannot mix blend with blend_epochized (an inner metadataset uses the other)"
        )
    key = "weight" if mode == "weight" else "repetitions"
    out = []
    for leaf in inner.leaves:
        base = getattr(leaf, key)
        out.append(replace(leaf, **{key: (1.0 if base is None else base) * factor}))
    return out


def _multiplier(doc: MdsFile, node: dict) -> int | None:
    """A reference's `shuffle_over_epochs_multiplier`: an integer >= 1, -1 or None (default 1)."""
    value = node.get("shuffle_over_epochs_multiplier", 1)
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int) or value == 0 or value < -1
    ):
        raise LoaderError(
            f"{doc.at(node, 'shuffle_over_epochs_multiplier')}: shuffle_over_epochs_multiplier must be an "
            f"integer >= 1, -1 or null, got {value!r}"
        )
    return value


def _check_shuffle_multiplier(doc: MdsFile, node: dict) -> None:
    value = node.get("shuffle_over_epochs_multiplier", 1)
    if value != 1:
        raise LoaderError(
            f"{doc.at(node, 'shuffle_over_epochs_multiplier')}: shuffle_over_epochs_multiplier={value!r} on a "
            "join member is not supported: set it on the join itself"
        )


def _aux(doc: MdsFile, node: dict, dataset_path: str) -> dict[str, str]:
    raw = doc.mapping(node, "aux", "dataset reference")
    if not raw:
        return {}
    out = {}
    for name, ref in raw.items():
        ref = str(ref)
        m = _URL.match(ref)
        protocol = m.group("protocol") if m else None
        if protocol == "filesystem":
            out[name] = "filesystem://" + join_path(doc.folder, m.group("path"))
        elif protocol and protocol.startswith("filesystem+"):
            out[name] = f"filesystem://{protocol.split('+', 1)[1]}://{m.group('path')}"
        else:
            out[name] = join_path(doc.folder, ref)
    return out


def resolve_split(
    path: str, split_part: str, subflavors: dict | None = None, storage_options: dict | None = None
) -> ResolvedSplit:
    """The leaf datasets of `split_part` in the metadataset at `path`. `subflavors` (the loader argument)
    override those set in the files, as in energon."""
    return _Resolver(storage_options).split_of(str(path), split_part, subflavors, None, str(path))
