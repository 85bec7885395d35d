"""`energon-arrow preview DATASET`: samples on the terminal as energon's `energon preview` shows them, or
`--html OUT`: a self-contained page with thumbnails, captions and fields of the first samples of each split."""

from __future__ import annotations

from collections.abc import Iterator

import click

from energon_arrow.cli.common import storage_options

BLOCK = 16  # samples fetched per read while paging on the terminal


def _samples(src, builder, limit: int | None) -> Iterator:
    """The split's samples in order (BuiltSample), at most `limit`."""
    from energon_arrow.loader.lint import iter_samples
    from energon_arrow.loader.reader import SampleReader

    end = len(src) if limit is None else min(limit, len(src))
    reader = SampleReader(src)
    try:
        for start in range(0, end, BLOCK):
            yield from iter_samples(src, builder, reader, start, min(start + BLOCK, end))
    finally:
        reader.close()


def _echo_sample(idx: int, s, url_of) -> None:
    from energon_arrow.cli.preview_text import describe, sample_fields

    click.echo(f"Sample {idx}")
    if s.error is not None:
        click.echo(
            f" ! {url_of(s.shard)}[{s.sample_index}] key {s.key!r}: {type(s.error).__name__}: {s.error}"
        )
        return
    for name, typ, value in sample_fields(s.sample):
        click.echo(f" - {name} ({typ}): {describe(value)}")


def _terminal(storage, jobs, empty, splits, limit) -> None:
    by_name = {split: (src, builder) for split, src, builder in jobs}
    for split in splits:
        if split in empty:
            click.echo(f"Dataset {split} is empty. Skipping.")
            continue
        src, builder = by_name[split]
        try:
            for idx, s in enumerate(_samples(src, builder, limit)):
                _echo_sample(idx, s, storage.url_of)
                if limit is None:
                    click.confirm("Continue?", abort=True)
        except click.Abort:
            click.echo("Exiting Preview")


def _html(out: str, storage, jobs, limit: int, thumb: int, options: dict) -> str:
    import os

    from energon_arrow.adapters import open_storage
    from energon_arrow.cli.preview_html import page

    sections = [(split, len(src), list(_samples(src, builder, limit))) for split, src, builder in jobs]
    config = jobs[0][1].config if jobs else None
    kind = "" if config is None else f"sample type {config.sample_type or 'CrudeWebdataset'}, "
    summary = f"{kind}{sum(len(src) for _, src, _ in jobs):,} samples in {len(jobs)} split(s)"
    text = page(f"energon-arrow preview: {storage.url}", summary, sections, storage.url_of, thumb)
    folder, name = os.path.split(out)
    # the storage options are those of the dataset's store: they apply to OUT only when it is a URL too
    target = open_storage(folder or ".", options if "://" in out else None)
    target.write_atomic(name, text)  # temp name + rename
    return f"wrote {out}: {sum(len(s) for _, _, s in sections):,} samples of {len(sections)} split(s)"


@click.command(name="preview")
@click.argument("path", metavar="DATASET")
@click.option(
    "--split-parts", default="train,val,test", show_default=True, help="The splits to show (comma-separated)."
)
@click.option(
    "--dataset-config", default="dataset.yaml", show_default=True, help="Dataset config in .nv-meta/."
)
@click.option("--split-config", default="split.yaml", show_default=True, help="Split config in .nv-meta/.")
@click.option(
    "--html",
    "html_out",
    metavar="OUT",
    help="Write a self-contained HTML page (thumbnails, captions, fields) here instead of paging on the terminal.",
)
@click.option(
    "--samples",
    type=click.IntRange(min=1),
    default=None,
    help="Samples per split (default: --html 8; terminal: all, asking 'Continue?' after each).",
)
@click.option(
    "--thumb-size",
    type=click.IntRange(min=16),
    default=256,
    show_default=True,
    help="Largest thumbnail side in px (--html).",
)
@click.option("--trust-remote-code", is_flag=True, help="Run a remote dataset's sample_loader.py code.")
@storage_options
def command(
    path,
    split_parts,
    dataset_config,
    split_config,
    html_out,
    samples,
    thumb_size,
    trust_remote_code,
    storage_options,
):
    """Show the samples of DATASET's splits decoded as the loader builds them (images as ASCII art), or with
    --html OUT write a page with the first samples of each split (image thumbnails, captions, fields)."""
    from energon_arrow.cli.lint import open_split_jobs

    splits = [s.strip() for s in split_parts.split(",") if s.strip()]
    if not splits:
        raise click.BadParameter("names no split", param_hint="--split-parts")
    if html_out is None and thumb_size != 256:
        raise click.UsageError("--thumb-size applies to --html only")
    storage, jobs, empty = open_split_jobs(
        path, splits, dataset_config, split_config, trust_remote_code, storage_options, "torchrgb"
    )
    if html_out is None:
        _terminal(storage, jobs, empty, splits, samples)
    else:
        click.echo(_html(html_out, storage, jobs, samples or 8, thumb_size, storage_options))
