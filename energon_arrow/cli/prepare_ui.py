"""Terminal pieces of `energon-arrow prepare`: the interactive questions and the summary (the progress bar is in
prepare_progress, imported only when it is shown: rich costs ~50 ms of start-up)."""

from __future__ import annotations

import functools
import json

import click

from energon_arrow.meta import CRUDE, SAMPLE_TYPES, crude_dataset, field_map_dataset, sample_loader_dataset

SAMPLE_TYPES_FOR_PROMPT = (*SAMPLE_TYPES, CRUDE)  # numbered in this order


def abort_exits_1(fn):
    """A question left unanswered (stdin ended, Ctrl-C at a prompt) ends with exit code 1, as in energon."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except click.Abort:
            raise click.ClickException(
                "aborted: a question got no answer (stdin ended or interrupted)"
            ) from None

    return wrapper


def ask_split_ratio() -> str:
    return click.prompt(
        'Please enter a desired train/val/test split like "0.5, 0.2, 0.3" or "8,1,1"', type=str
    )


def ask_dataset_yaml(part_types: list[str], first_shard: str):
    """energon's questions, in its order: create dataset.yaml?, sample type (or crude), field map or sample
    loader, one part per field. Returns a DatasetYaml or None."""
    click.echo(f"Part types found in the first shard ({first_shard}): {', '.join(part_types)}")
    if not click.confirm("Do you want to create a dataset.yaml interactively?", default=True):
        return None
    names = SAMPLE_TYPES_FOR_PROMPT
    click.echo("The following sample types are available:")
    for i, name in enumerate(names):
        click.echo(f"{i}. {name}" + ("  (plain dict for cooking)" if name == CRUDE else ""))
    while True:
        choice = click.prompt("Please enter a number to choose a class", type=int)
        if 0 <= choice < len(names):
            break
        click.echo("Invalid choice. Please try again.")
    sample_type = names[choice]
    if sample_type == CRUDE:
        click.echo("CrudeWebdataset needs no field map; provide a Cooker in your TaskEncoder.")
        return crude_dataset()
    return ask_field_map(sample_type, part_types)


def ask_field_map(sample_type: str, part_types: list[str]):
    """energon's questions for a chosen sample type: field map [Y] or sample loader [n], then one part per
    field. Returns a DatasetYaml."""
    if len(part_types) > 10:
        click.echo("You cannot set a field_map for this dataset. You will need a sample_loader.")
        return sample_loader_dataset(sample_type)
    if not click.confirm(
        "Do you want to set a simple field_map[Y] (or write your own sample_loader [n])?", default=True
    ):
        return sample_loader_dataset(sample_type)
    click.echo(
        "For each field, enter the part name (json[field][field] for JSON fields, jpg,png for alternatives)."
    )
    field_map = {}
    for f in SAMPLE_TYPES[sample_type]:
        hint = f" ({f.type}" + ("" if f.required else f", default: {f.default}") + ")"
        while True:
            value = click.prompt(f"Part for field '{f.name}'{hint}", default="", show_default=False).strip()
            if not value and not f.required:
                break
            options = [v.split("[", 1)[0] for v in value.split(",")]
            if value and all(o in part_types for o in options):
                field_map[f.name] = value
                break
            click.echo(
                f"That part type doesn't exist in the shard ({', '.join(part_types)}). Please try again."
            )
    return field_map_dataset(sample_type, field_map)


def ask_override_sample_loader() -> bool:
    return click.confirm("Do you want to override the existing sample loader?")


def echo_summary(result, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(result.as_dict(), indent=2))
        return
    for w in result.warnings:
        click.echo(f"warning: {w}", err=True)
    for bad in result.bad_shards:
        click.echo(f"skipped bad shard: {bad.error}", err=True)
    rate = result.samples / result.seconds if result.seconds else 0.0
    parts = ", ".join(f"{k}: {v:,}" for k, v in result.part_types.items())
    parts = f" ({parts})" if parts else ""
    click.echo(
        f"Prepared {result.root}: {result.shards:,} shards ({result.indexed:,} indexed, {result.reused:,} unchanged, "
        + (f"{result.resumed:,} resumed from an interrupted run, " if result.resumed else "")
        + f"{result.removed:,} removed, {len(result.bad_shards):,} bad), {result.samples:,} samples, "
        f"{result.parts:,} parts{parts}, {result.bytes / 2**20:,.1f} MiB in {result.seconds:.2f} s "
        f"({rate:,.0f} samples/s)"
    )
    if result.media:
        click.echo(f"Media metadata: {result.media:,} files (index.sqlite)")
    if not result.energon_index:
        click.echo(
            "No index.sqlite (--no-energon-index): energon-arrow loads all of this dataset; energon only iterates "
            "it (its joins, aux: file stores, key lookups and `energon mount` need index.sqlite)."
        )
    if result.splits:
        click.echo(
            "Splits: "
            + ", ".join(
                f"{k}: {result.splits[k]} shards / {result.split_samples[k]:,} samples" for k in result.splits
            )
        )
