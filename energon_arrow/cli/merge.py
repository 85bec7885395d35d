"""`energon-arrow merge`: concatenate Megatron token datasets (.bin/.idx parts) into one, bounded memory."""

from __future__ import annotations

import json

import click

from energon_arrow.cli.common import storage_options
from energon_arrow.cli.main import CliError


@click.command("merge")
@click.option(
    "--input",
    "inputs",
    multiple=True,
    required=True,
    metavar="PREFIX_OR_GLOB",
    help="Dataset prefix (repeatable), or a glob of .idx files such as 'parts/*_document.idx'; merged in order.",
)
@click.option(
    "--output-prefix", required=True, help="Output prefix (local or s3://): writes PREFIX.bin/.idx."
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@storage_options
def command(inputs, output_prefix, as_json, storage_options):
    """Merge token datasets (Megatron's merge_datasets / add_index), streaming index arrays and data."""
    from energon_arrow.tokens.builder import merge_datasets
    from energon_arrow.tokens.indexed import prefix_of
    from energon_arrow.tokens.jsonl import expand_inputs, is_glob

    prefixes = []
    for text in inputs:
        if is_glob(text):
            if not text.endswith(".idx"):
                raise CliError(f"{text}: a glob must match .idx files (e.g. parts/*.idx)")
            prefixes += [prefix_of(f.url) for f in expand_inputs([text], storage_options)]
        else:
            prefixes.append(prefix_of(text))
    summary = merge_datasets(prefixes, output_prefix, storage_options)
    summary["inputs"] = prefixes
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        click.echo(
            f"merged {len(prefixes)} dataset(s) into {summary['prefix']}: {summary['documents']:,} documents, "
            f"{summary['sequences']:,} sequences, {summary['tokens']:,} tokens ({summary['dtype']})"
        )
