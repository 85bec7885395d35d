"""`energon-arrow analyze-debug LOGS...`: energon's `energon analyze-debug` on the worker debug logs that
`WorkerConfig(worker_debug_path=..., worker_log_level=...)` makes the loader write (energon/debug_log.py; energon's
own logs read the same way).

It picks the loader to analyse (the one of `--include-modality`; asks when there are several), lines up its
`...yield` records by their `global_idx` (one step per batch index, every rank's file contributing to the same
step), and writes a heatmap PNG: x = step, y = sample key in order of first appearance, colour = the log file
(rank) it came from. Without loader records, or with `--force-loading-order`, it uses the workers' `yield_batch`
records instead (each worker's batches in the order it produced them: energon-arrow's workers produce batches in
reading order). Prints `Analyzing N logs...`, the loaders found, `Found K unique sample keys, S steps` and the
heatmap's axes.
"""

from __future__ import annotations

import colorsys
import json
from collections import defaultdict
from pathlib import Path

import click
import numpy as np

LOADER_INIT = ("SavableLoader.__init__", "BasicDataLoader.__init__")
LOADER_YIELD = ("SavableDataLoader.yield", "BasicDataLoader.yield")


def _records(path: Path, types: tuple[str, ...]):
    """The JSON records of `path` whose type is one of `types` (lines that are not JSON are reported, skipped)."""
    with path.open() as f:
        for n, line in enumerate(f, 1):
            if not any(f'"t": "{t}"' in line for t in types):
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                click.echo(f"{path}:{n}: not a JSON line, skipped: {line[:80]!r}")


def _describe(config: dict) -> tuple[str, str]:
    """(modality, dataset path) of a loader record's config: energon-arrow's {"mode", "datasets"} or energon's
    nested wrapper configs down to the dataset's `map_fn_config` {"training", "_path"}."""
    if "mode" in config:
        return config["mode"], ",".join(config.get("datasets", []))
    fn = config.get("map_fn_config")
    if isinstance(fn, dict) and "training" in fn:
        return ("train" if fn["training"] else "val"), str(fn.get("_path", "?"))
    for key, pick in (
        ("dataset", lambda v: v),
        ("dataset_weights", lambda v: v[0][0]),
        ("datasets", lambda v: v[0]),
    ):
        if key in config:
            return _describe(pick(config[key]))
    raise click.ClickException(f"unrecognised loader config in the debug log: {json.dumps(config)[:200]}")


def _loader_steps(files: list[Path], modalities: list[str], skip: int) -> dict[int, list[tuple[int, list]]]:
    """step -> [(file index, keys)] of the chosen loader's yields."""
    loaders: dict[int, list] = {}  # id -> [modality, path, steps]
    for path in files:
        for rec in _records(path, LOADER_INIT + LOADER_YIELD):
            if rec["t"] in LOADER_INIT:
                mode, where = _describe(rec["config"])
                known = loaders.setdefault(rec["id"], [mode, where, 0])
                if known[:2] != [mode, where]:
                    raise click.ClickException(
                        f"{path}: loader {rec['id']} is {mode} {where} here, {known[:2]} before"
                    )
            elif rec["id"] in loaders:
                loaders[rec["id"]][2] = max(loaders[rec["id"]][2], rec["global_idx"] + 1)
    click.echo("Available loaders:")
    for lid, (mode, where, steps) in loaders.items():
        click.echo(f"  {lid}: {mode} {where} {steps} steps")
    chosen = [lid for lid, info in loaders.items() if info[0] in modalities]
    if not chosen:
        return {}
    lid = chosen[0]
    if len(chosen) > 1:
        lid = click.prompt("Choose loader id", type=click.Choice([str(i) for i in chosen]), show_choices=True)
        lid = int(lid)
    click.echo(f"Reading for loader {lid}: {loaders[lid][0]} {loaders[lid][1]}")
    steps: dict[int, list] = defaultdict(list)
    for src, path in enumerate(files):
        for rec in _records(path, LOADER_YIELD):
            if rec["id"] == lid and rec["global_idx"] >= skip and "keys" in rec:
                steps[rec["global_idx"] - skip].append((src, rec["keys"]))
    return steps


def _worker_steps(files: list[Path], modalities: list[str], skip: int) -> dict[int, list[tuple[int, list]]]:
    """step -> [(file index, keys)] from the workers' `yield_batch` records (step: the worker's batch index)."""
    steps: dict[int, list] = defaultdict(list)
    for src, path in enumerate(files):
        for rec in _records(path, ("yield_batch",)):
            if rec.get("m") in modalities and rec["idx"] >= skip and rec.get("keys"):
                steps[rec["idx"] - skip].append((src, rec["keys"]))
    return steps


def _palette(n: int, colorize: bool) -> np.ndarray:
    """One RGB colour per log file: white for the first, then evenly spaced hues."""
    if not colorize:
        return np.full((max(n, 1), 3), 255.0)
    hues = [colorsys.hsv_to_rgb(i / max(n - 1, 1), 1.0, 1.0) for i in range(max(n - 1, 0))]
    return np.array([(1.0, 1.0, 1.0), *hues]) * 255.0


def write_heatmap(
    points, n_keys: int, n_steps: int, size: tuple[int, int], gain: float, colors, path
) -> tuple:
    """A PNG of `points` (key id, step, file index) binned to at most `size` (samples, steps) pixels; returns the
    (samples, steps) the axes span."""
    from PIL import Image

    fy, fx = -(-n_keys // size[0]), -(-n_steps // size[1])
    image = np.zeros((-(-n_keys // fy), -(-n_steps // fx), 3))
    keys, steps, srcs = (np.asarray(c, np.int64) for c in zip(*points))
    np.add.at(image, (keys // fy, steps // fx), colors[srcs % len(colors)])
    image = np.clip(image * gain / np.maximum(image.max((0, 1)), 1e-9) * 255, 0, 255).astype(np.uint8)
    Image.fromarray(image).save(path)
    return n_keys, n_steps


@click.command(name="analyze-debug")
@click.argument("log_paths", nargs=-1, type=click.Path(exists=True, path_type=Path))
@click.option("--heatmap-path", type=click.Path(dir_okay=False, path_type=Path), default=Path("heatmap.png"))
@click.option("--heatmap-steps", type=int, default=1000, help="Heatmap width: steps are binned to this many.")
@click.option(
    "--heatmap-samples", type=int, default=1000, help="Heatmap height: samples are binned to this many."
)
@click.option("--heatmap-gain", type=float, default=10, help="Brightness factor of the heatmap.")
@click.option("--force-loading-order", is_flag=True, help="Use the workers' records, not the loader's.")
@click.option(
    "--include-modality", default="train", help="Modalities to include (train,val), comma separated."
)
@click.option("--skip", type=int, default=0, help="Leave out this many steps at the start.")
@click.option("--no-colors", is_flag=True, help="Do not colour the log files (ranks) differently.")
def command(
    log_paths, heatmap_path, heatmap_steps, heatmap_samples, heatmap_gain, force_loading_order, include_modality,
    skip, no_colors,
):  # fmt: skip
    """Plot which samples each step loaded, from worker debug logs (LOG_PATHS: folders of *.jsonl, or files)."""
    if not log_paths:
        raise click.ClickException("No log paths specified")
    files = [f for p in log_paths for f in (sorted(p.glob("*.jsonl")) if p.is_dir() else [p])]
    if not files:
        raise click.ClickException("No log files found")
    click.echo(f"Analyzing {len(files)} logs...")
    modalities = [m.strip() for m in include_modality.split(",")]
    steps = {} if force_loading_order else _loader_steps(files, modalities, skip)
    if not steps:
        click.echo("Using the workers' batch records (the loading order)")
        steps = _worker_steps(files, modalities, skip)
    if not steps:
        raise click.ClickException("No data found in logs")
    key_ids: dict[str, int] = {}
    points = [
        (key_ids.setdefault(k, len(key_ids)), step, src)
        for step in sorted(steps)
        for src, keys in steps[step]
        for k in keys
    ]
    n_steps = max(steps) + 1
    click.echo(f"Found {len(key_ids)} unique sample keys, {n_steps} steps")
    colors = _palette(len(files), not no_colors)
    size = (heatmap_samples, heatmap_steps)
    n_samples, n_steps = write_heatmap(
        points, len(key_ids), n_steps, size, heatmap_gain, colors, heatmap_path
    )
    click.echo(f"Wrote heatmap to {heatmap_path}")
    click.echo("Heatmap axes:")
    click.echo(f"  x-axis: {n_steps} worker steps")
    click.echo(f"  y-axis: {n_samples} samples")
