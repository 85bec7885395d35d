"""`energon info` parity: dataset summary (samples, bytes, shards, sample type, splits) plus part types."""

from __future__ import annotations

import pyarrow.compute as pc

from energon_arrow.adapters import NotFound
from energon_arrow.meta.dataset_yaml import read_dataset_yaml
from energon_arrow.query.dataset import Dataset

SPLIT_ORDER = ("train", "val", "test")


def fmt_size(size: float) -> str:
    """Sizes as energon prints them (two decimals, binary units)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024:
            return f"{size:.2f} {unit}"
        size /= 1024
    return f"{size:.2f} PiB"


def _sample_type(ds: Dataset, dataset_config: str) -> str:
    try:
        d = read_dataset_yaml(ds.storage, dataset_config)
    except NotFound:
        return "unknown (no dataset.yaml)"
    if d.crude:
        return "megatron.energon.CrudeWebdataset"
    return f"{d.sample_type_module}.{d.sample_type}"


def _exclude_summary(ds: Dataset) -> dict:
    """Per kind of exclude entry (shard, sample, unknown): entries and how many match nothing (from the resolved
    exclusions, `Dataset.exclusions`: cached; the first resolution after split.yaml changed is the only part of
    `info` that reads sample rows)."""
    entries = ds.exclusions()
    matched = pc.sum(pc.is_valid(entries.column("sample_index"))).as_py() or 0
    out = {}
    for row in pc.value_counts(entries.column("kind")).to_pylist():  # in order of first appearance
        kind, n = row["values"], row["counts"]
        out[kind] = {"entries": n, "unmatched": {"shard": 0, "sample": n - matched}.get(kind, n)}
    return out


def dataset_info(ds: Dataset, dataset_config: str = "dataset.yaml") -> dict:
    """A JSON-ready summary. Split percentages and counts follow energon (shard counts from .info.json, before
    exclusions); `effective_samples` is what iterating the split yields after `exclude`. Answered from the
    shards table, the side index's summary (`Dataset.ensure_summary`) and the resolved exclusions
    (`Dataset.exclusions`, the `split_sizes` view); sample rows are read only to resolve `exclude` sample
    entries the first time."""
    totals = ds._internal(
        "SELECT count(*) AS shards, coalesce(sum(size), 0)::BIGINT AS bytes, coalesce(sum(sample_count), 0)::BIGINT "
        "AS samples FROM shards"
    ).to_pylist()[0]
    ds.ensure_summary()
    parts = ds._internal(
        """SELECT part_name::VARCHAR AS part_name, parts, samples, total_bytes, min_bytes, max_bytes,
                  round(avg_bytes, 1) AS avg_bytes FROM part_types"""
    ).to_pylist()
    ds.exclusions()
    splits = ds._internal("SELECT * FROM split_sizes").to_pylist()
    by_name = {s["split"]: s for s in splits}
    empty = {"shards": 0, "samples": 0, "excluded_shards": 0, "effective_samples": 0}
    split_rows = []
    for name in sorted(ds.split_names, key=lambda n: (SPLIT_ORDER.index(n) if n in SPLIT_ORDER else 3, n)):
        s = by_name.get(name, empty)
        split_rows.append(
            {
                "name": name,
                "percent": round(100 * s["samples"] / totals["samples"], 2) if totals["samples"] else 0.0,
                "samples": s["samples"],
                "shards": s["shards"],
                "excluded_shards": s["excluded_shards"],
                "effective_samples": s["effective_samples"],
            }
        )
    return {
        "name": ds.url.rstrip("/").rsplit("/", 1)[-1],
        "path": ds.url,
        "samples": totals["samples"],
        "bytes": totals["bytes"],
        "shards": totals["shards"],
        "energon_version": ds.info.energon_version or "unknown",
        "sample_type": _sample_type(ds, dataset_config),
        "index": ds.index_source,
        "energon_index": ds.energon_index,
        "part_types": parts,
        "splits": split_rows,
        "exclude": _exclude_summary(ds),
    }


ENERGON_INDEX_LINE = {
    True: "energon index (index.sqlite): written; energon and energon-arrow can load this dataset",
    False: "energon index (index.sqlite): none (prepared with --no-energon-index); energon-arrow loads all of "
    "this dataset, energon only iterates it: its joins (join:), file stores (aux:), lookups by key and "
    "`energon mount` need index.sqlite",
}


def format_info(info: dict) -> str:
    """The summary as text, energon's layout first, then part types and exclusions."""
    lines = [
        f"* {info['name']}: `{info['path']}` ({info['samples']:,} samples, {fmt_size(info['bytes'])} in "
        f"{info['shards']} shards)",
        f"  * Created with energon version: {info['energon_version']}",
        f"  * Sample Type: {info['sample_type']}",
        "  * Default Splits:",
    ]
    for s in info["splits"]:
        line = f"    * `{s['name']}`: {s['percent']:.0f}%, {s['samples']:,} samples in {s['shards']} shards"
        if s["effective_samples"] != s["samples"]:
            line += f" ({s['effective_samples']:,} after exclusions)"
        lines.append(line)
    lines.append("  * Part types:")
    for p in info["part_types"]:
        lines.append(
            f"    * `{p['part_name']}`: {p['parts']:,} parts in {p['samples']:,} samples, {fmt_size(p['total_bytes'])} "
            f"(min {p['min_bytes']:,} B, avg {p['avg_bytes']:,} B, max {p['max_bytes']:,} B)"
        )
    for kind, e in info["exclude"].items():
        line = f"  * Excluded {kind} entries: {e['entries']:,}"
        if e["unmatched"]:
            line += f" ({e['unmatched']:,} match nothing)"
        lines.append(line)
    lines.append(f"  * Index: {info['index']}")
    lines.append(f"  * {ENERGON_INDEX_LINE[info['energon_index']]}")
    return "\n".join(lines)
