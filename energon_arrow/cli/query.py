"""`energon-arrow query DATASET SQL`: read-only SQL over a dataset's index."""

from __future__ import annotations

import os
import sys

import click

from energon_arrow.cli.common import query_limits, storage_options
from energon_arrow.cli.main import CliError


def token_prefix(dataset: str, options: dict) -> str | None:
    """The prefix of a Megatron token dataset (`PREFIX`, `PREFIX.idx` or `PREFIX.bin`), else None."""
    from energon_arrow.adapters import StorageError
    from energon_arrow.tokens.indexed import prefix_of, split_prefix

    prefix = prefix_of(dataset)
    try:
        storage, stem = split_prefix(prefix, options)
    except ValueError:  # a folder or a bare bucket: not a token prefix
        return None
    try:
        return prefix if storage.exists(stem + ".idx") and not storage.isdir(stem) else None
    except StorageError as exc:
        # the store fails (endpoint, credentials): name what the user gave, not the probe
        raise type(exc)(dataset.rstrip("/"), exc.reason) from None


def write_output(target: str, data: bytes, options: dict) -> None:
    """Write `data` to a local path or URL atomically (temporary name, then publish)."""
    from energon_arrow.adapters import open_storage

    parent, _, name = target.rstrip("/").rpartition("/")
    if not name:
        raise CliError(f"--output {target!r} names no file")
    storage = open_storage(parent or os.getcwd(), options)
    storage.makedirs("")
    storage.write_atomic(name, data)


@click.command("query")
@click.argument("dataset")
@click.argument("sql")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "csv", "json", "parquet", "arrow"]),
    default="table",
    show_default=True,
    help="Output format (parquet and arrow need --output or a redirected stdout).",
)
@click.option(
    "--output", "-o", default=None, metavar="FILE", help="Write the result here (local path or URL)."
)
@click.option("--max-rows", default=50, show_default=True, help="Rows shown by --format table.")
@click.option(
    "--no-verify",
    is_flag=True,
    help="Skip checking shards against the index (size, mtime/ETag, content fingerprint).",
)
@click.option("--split-config", default="split.yaml", show_default=True, help="Split config in .nv-meta/.")
@storage_options
@query_limits
def command(dataset, sql, fmt, output, max_rows, no_verify, split_config, storage_options, limits):
    """Run read-only DuckDB SQL over DATASET's views: samples, parts, shards, sample_parts, part_types, splits,
    excluded, split_samples. Example: energon-arrow query /data/ds "SELECT shard_id, count(*) FROM samples
    GROUP BY ALL". For a Megatron token dataset (DATASET = PREFIX of PREFIX.bin/.idx) the views are
    documents(document, first_sequence, sequences, tokens, byte_offset, byte_length) and
    sequences(sequence, document, length, pointer[, mode])."""
    from energon_arrow.query.export import BINARY_FORMATS, render

    if fmt in BINARY_FORMATS and output is None and sys.stdout.isatty():
        raise CliError(f"--format {fmt} writes binary data: give --output FILE or redirect stdout")
    prefix = token_prefix(dataset, storage_options)
    if prefix is not None:
        from energon_arrow.tokens.table import token_sql

        if no_verify or split_config != "split.yaml":
            raise CliError(
                f"{dataset}: --no-verify and --split-config apply to WebDataset indexes, not token datasets"
            )
        table = token_sql(prefix, sql, storage_options, limits)
    else:
        from energon_arrow.query import open_dataset

        with open_dataset(
            dataset, storage_options, verify=not no_verify, split_config=split_config, limits=limits
        ) as ds:
            table = ds.sql(sql).arrow()
    data = render(table, fmt, max_rows=max_rows)
    if output is None:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    write_output(output, data, storage_options)
    click.echo(f"wrote {table.num_rows:,} rows ({fmt}, {len(data):,} bytes) to {output}", err=True)
