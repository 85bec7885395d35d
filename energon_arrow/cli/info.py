"""`energon-arrow info DATASET`: what `energon info` prints, plus part types, exclusions and --json."""

from __future__ import annotations

import json

import click

from energon_arrow.cli.common import query_limits, storage_options


@click.command("info")
@click.argument("dataset")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--split-config", default="split.yaml", show_default=True, help="Split config in .nv-meta/.")
@click.option(
    "--dataset-config", default="dataset.yaml", show_default=True, help="Dataset config in .nv-meta/."
)
@click.option(
    "--no-verify",
    is_flag=True,
    help="Skip checking shards against the index (size, mtime/ETag, content fingerprint).",
)
@storage_options
@query_limits
def command(dataset, as_json, split_config, dataset_config, no_verify, storage_options, limits):
    """Summarise a prepared dataset: samples, bytes, shards, sample type, splits, part types."""
    from energon_arrow.query import open_dataset
    from energon_arrow.query.info import dataset_info, format_info

    with open_dataset(
        dataset, storage_options, verify=not no_verify, split_config=split_config, limits=limits
    ) as ds:
        info = dataset_info(ds, dataset_config)
    click.echo(json.dumps(info, indent=2) if as_json else format_info(info))
