"""`energon-arrow demo`: generate a small dataset and run the main job on it end to end."""

from __future__ import annotations

import os
import time

import click


@click.command("demo")
@click.option(
    "--workdir", default="/tmp/energon-arrow-demo", show_default=True, help="Where to generate data."
)
@click.option("--shards", default=8, show_default=True)
@click.option("--samples-per-shard", default=200, show_default=True)
def command(workdir: str, shards: int, samples_per_shard: int):
    """Generate WebDataset shards locally and run the pipeline over them."""
    from energon_arrow.adapters import open_storage
    from energon_arrow.testing.synthetic import write_webdataset

    root = os.path.join(workdir, "webdataset")
    t0 = time.perf_counter()
    names = write_webdataset(root, shards=shards, samples_per_shard=samples_per_shard)
    storage = open_storage(root)
    total = sum(f.size for f in storage.scan("**/*.tar"))
    click.echo(
        f"generated {len(names)} shards, {shards * samples_per_shard} samples, {total / 1e6:.1f} MB "
        f"in {time.perf_counter() - t0:.2f}s at {root}"
    )
