"""`energon info` parity: dataset summary (samples, bytes, shards, sample type, splits) plus part types."""

from __future__ import annotations

from energon_arrow.adapters import NotFound
from energon_arrow.meta.dataset_yaml import read_dataset_yaml
from energon_arrow.query.dataset import Dataset
from energon_arrow.query.part_counts import samples_per_part

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


def dataset_info(ds: Dataset, dataset_config: str = "dataset.yaml") -> dict:
    """A JSON-ready summary. Split percentages and counts follow energon (shard counts from .info.json, before
    exclusions); `effective_samples` is what iterating the split yields after `exclude`."""
    totals = ds._internal(
        "SELECT count(*) AS shards, coalesce(sum(size), 0)::BIGINT AS bytes, coalesce(sum(sample_count), 0)::BIGINT "
        "AS samples FROM shards"
    ).to_pylist()[0]
    # the part_types view's columns; its distinct-sample count in one streaming pass (part_counts.py)
    parts = ds._internal(
        """SELECT part_name::VARCHAR AS part_name, count(*) AS parts, sum(content_size)::BIGINT AS total_bytes,
                  min(content_size) AS min_bytes, max(content_size) AS max_bytes,
                  round(avg(content_size), 1) AS avg_bytes
           FROM parts GROUP BY part_name ORDER BY part_name"""
    ).to_pylist()
    having = samples_per_part(ds.batches("parts", ["shard_id", "sample_index", "part_name"]))
    parts = [{"part_name": p["part_name"], "parts": p["parts"], "samples": having.get(p["part_name"], 0),
              **{k: p[k] for k in ("total_bytes", "min_bytes", "max_bytes", "avg_bytes")}} for p in parts]  # fmt: skip
    splits = ds._internal(
        """SELECT sp.split, count(*) AS shards, sum(sh.sample_count)::BIGINT AS samples,
                  count(*) FILTER (sp.excluded) AS excluded_shards
           FROM splits sp JOIN shards sh USING (shard_id) GROUP BY sp.split"""
    ).to_pylist()
    counts = ds._internal("SELECT split, count(*) AS n FROM split_samples GROUP BY split").to_pydict()
    effective = dict(zip(counts["split"], counts["n"]))
    by_name = {s["split"]: s for s in splits}
    split_rows = []
    for name in sorted(ds.split_names, key=lambda n: (SPLIT_ORDER.index(n) if n in SPLIT_ORDER else 3, n)):
        s = by_name.get(name, {"shards": 0, "samples": 0, "excluded_shards": 0})
        split_rows.append(
            {
                "name": name,
                "percent": round(100 * s["samples"] / totals["samples"], 2) if totals["samples"] else 0.0,
                "samples": s["samples"],
                "shards": s["shards"],
                "excluded_shards": s["excluded_shards"],
                "effective_samples": effective.get(name, 0),
            }
        )
    excluded = ds._internal(
        "SELECT kind, count(*) AS n, count(*) FILTER (NOT matched) AS unmatched FROM excluded GROUP BY kind"
    ).to_pylist()
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
        "exclude": {row["kind"]: {"entries": row["n"], "unmatched": row["unmatched"]} for row in excluded},
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
