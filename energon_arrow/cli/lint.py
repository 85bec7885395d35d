"""`energon-arrow lint DATASET`: read and decode every sample (energon's `energon lint`), in parallel."""

from __future__ import annotations

import json
import sys
import time

import click

from energon_arrow.cli.common import storage_options


class LintFailed(click.ClickException):
    """Some samples (or shard indexes) failed: the report is printed, the command exits 1."""


def open_split_jobs(path, splits, dataset_config, split_config, trust_remote_code, options, image_decode):
    """(split, source, builder) for each non-empty split, plus the names of the empty ones."""
    from energon_arrow.adapters import open_storage
    from energon_arrow.loader.builder import SampleBuilder
    from energon_arrow.loader.dataset_yaml_args import yaml_split_args
    from energon_arrow.loader.source import open_split
    from energon_arrow.meta import read_dataset_yaml
    from energon_arrow.query import open_dataset
    from energon_arrow.samples.decoders import PartDecoder

    storage = open_storage(path, options)
    # the split file the dataset.yaml names wins over --split-config, as in energon (open_split applies it too)
    split_config = yaml_split_args(read_dataset_yaml(storage, dataset_config)).get(
        "split_config", split_config
    )
    with open_dataset(storage, split_config=split_config) as ds:  # checks the shards against the index
        known = set(ds.split_names)
        if not ds.energon_index:
            from energon_arrow.query.info import ENERGON_INDEX_LINE

            click.echo(ENERGON_INDEX_LINE[False], err=True)
    jobs, empty = [], []
    for split in splits:
        if split not in known:
            empty.append(split)
            continue
        src = open_split(
            storage,
            split,
            dataset_yaml=dataset_config,
            split_config=split_config,
            verify=False,
            publish=False,
        )
        if len(src) == 0:
            empty.append(split)
            continue
        decoder = PartDecoder(image_decode=image_decode)
        builder = SampleBuilder(storage, src.config, decoder, trust_remote_code=trust_remote_code)
        jobs.append((split, src, builder))
    return storage, jobs, empty


def _progress(enabled: bool, total: int):
    if not enabled:
        return None, lambda n, f: None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(
        TextColumn("linting"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[failed]:,} failed"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        redirect_stdout=False,  # the report stays on stdout (the bar is on stderr)
    )
    task = bar.add_task("lint", total=total, failed=0)
    failed = 0

    def advance(n: int, f: int) -> None:
        nonlocal failed
        failed += f
        bar.update(task, advance=n, failed=failed)

    bar.start()
    return bar, advance


@click.command(name="lint")
@click.argument("path", metavar="DATASET")
@click.option(
    "--split-parts",
    default="train,val,test",
    show_default=True,
    help="The splits to check (comma-separated).",
)
@click.option(
    "--dataset-config", default="dataset.yaml", show_default=True, help="Dataset config in .nv-meta/."
)
@click.option("--split-config", default="split.yaml", show_default=True, help="Split config in .nv-meta/.")
@click.option(
    "--parallel",
    type=click.IntRange(min=1),
    default=None,
    show_default="one per CPU, at most 16",
    help="Worker processes (threads for object stores).",
)
@click.option(
    "--image-decode",
    default="pil",
    show_default=True,
    help="energon image_decode mode images are decoded to; 'pil' decodes every pixel without the tensor copy.",
)
@click.option("--progress/--no-progress", default=True, help="Show a progress bar (on stderr).")
@click.option("--trust-remote-code", is_flag=True, help="Run a remote dataset's sample_loader.py code.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
@storage_options
def command(
    path,
    split_parts,
    dataset_config,
    split_config,
    parallel,
    image_decode,
    progress,
    trust_remote_code,
    as_json,
    storage_options,
):
    """Check that every sample of DATASET's splits loads: each part the dataset.yaml uses is decoded and the
    sample built, as the loader does. Reports each failing sample (split, shard, key, part, reason) and each
    shard whose .tar.idx disagrees with .info.json; exits 1 when anything failed."""
    from energon_arrow.index.workers import default_workers
    from energon_arrow.loader.lint import check_tar_indexes, lint_splits
    from energon_arrow.meta import read_info

    t0 = time.perf_counter()
    splits = [s.strip() for s in split_parts.split(",") if s.strip()]
    if not splits:
        raise click.BadParameter("names no split", param_hint="--split-parts")
    storage, jobs, empty = open_split_jobs(
        path, splits, dataset_config, split_config, trust_remote_code, storage_options, image_decode
    )
    mismatches = check_tar_indexes(storage, read_info(storage).shard_counts)
    if not as_json:
        for m in mismatches:
            found = "missing" if m.idx_samples is None else f"{m.idx_samples} samples"
            click.echo(f"{storage.url_of(m.shard)}.idx: {found}, .info.json says {m.info_samples}")
        for split in empty:
            click.echo(f"Skipping empty split part {split}")
    total = sum(len(src) for _, src, _ in jobs)
    bar, advance = _progress(progress and not as_json, total)
    failures = []
    try:
        for failure in lint_splits(jobs, parallel or default_workers(), advance):
            failures.append(failure)
            if not as_json:
                where = f"{storage.url_of(failure.shard)}[{failure.sample_index}]@{failure.byte_offset}"
                part = f" part {failure.part!r}" if failure.part is not None else ""
                msg = f"FAILED {failure.split}: {where} key {failure.key!r}{part}: {failure.reason}"
                if bar is not None and sys.stdout.isatty():  # above the live bar on the same terminal
                    bar.console.print(msg, markup=False, highlight=False, soft_wrap=True)
                else:
                    click.echo(msg)
    finally:
        if bar is not None:
            bar.stop()
    order = {s: i for i, s in enumerate(splits)}
    failures.sort(key=lambda f: (order[f.split], f.shard, f.sample_index))
    seconds = time.perf_counter() - t0
    if as_json:
        report = dict(
            dataset=storage.url,
            splits={split: len(src) for split, src, _ in jobs},
            empty_splits=empty,
            samples=total,
            failed=len(failures),
            failures=[f.as_dict() for f in failures],
            index_mismatches=[m.as_dict() for m in mismatches],
            seconds=round(seconds, 3),
        )
        click.echo(json.dumps(report, indent=2))
    else:
        rate = total / seconds if seconds else 0.0
        click.echo(
            f"Checked {total:,} samples of {len(jobs)} split(s) in {seconds:.2f} s ({rate:,.0f} samples/s): "
            f"{len(failures):,} failed"
        )
    if failures or mismatches:
        raise LintFailed(
            f"lint failed: {len(failures):,} of {total:,} samples"
            + (f", {len(mismatches)} shard index(es)" if mismatches else "")
        )
