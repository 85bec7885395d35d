"""`energon-arrow prepare-media PATH_OR_URL`: energon's `prepare-media` (media metadata of a prepared WebDataset
or of the files of a plain folder, into `.nv-meta/index.sqlite`)."""

from __future__ import annotations

import click

from energon_arrow.cli.common import storage_options
from energon_arrow.cli.prepare import media_filter_options, parse_media_filter


@click.command(name="prepare-media")
@click.argument("path")
@click.option("--progress/--no-progress", default=True, help="Show a progress bar (on stderr).")
@click.option(
    "--num-workers",
    type=int,
    default=0,
    show_default="one per CPU, at most 16",
    help="Parallel readers (processes for local data, threads for object stores).",
)
@media_filter_options
@click.option(
    "--tmp-path",
    type=click.Path(file_okay=False),
    help="Where index.sqlite is built before publishing (default: inside .nv-meta for local folders, else the "
    "system temp folder).",
)
@storage_options
def command(
    path,
    progress,
    num_workers,
    media_metadata_by_glob,
    media_metadata_by_header,
    media_metadata_by_extension,
    tmp_path,
    storage_options,
):
    """Store the media metadata (image size and mode, video and audio streams) of PATH_OR_URL in
    .nv-meta/index.sqlite: of every media part of a prepared WebDataset, or of every media file below a plain
    folder (a filesystem dataset, for SystemFileStore(base_dir)). Exactly one --media-metadata-by-... option."""
    from energon_arrow.adapters import open_storage
    from energon_arrow.index.media_prepare import prepare_media
    from energon_arrow.index.workers import default_workers
    from energon_arrow.meta import info_exists

    media_filter = parse_media_filter(
        media_metadata_by_glob, media_metadata_by_header, media_metadata_by_extension, required=True
    )
    if str(path).endswith((".jsonl", ".yaml")):
        kind = "jsonl" if str(path).endswith(".jsonl") else "metadataset"
        raise click.ClickException(
            f"'prepare-media' only supports WebDatasets or filesystem datasets, but this path is a '{kind}' dataset"
        )
    storage = open_storage(path, storage_options)
    kind = "webdataset" if info_exists(storage) else "filesystem dataset"
    click.echo(f"Preparing {kind} and computing media metadata...")
    bar = None
    if progress:
        import sys

        bar = click.progressbar(length=0, label="Processing media", show_pos=True, file=sys.stderr)

    def advance(done: int, total: int) -> None:
        bar.length = total
        bar.update(done - bar.pos)

    try:
        count = prepare_media(
            storage,
            media_filter,
            num_workers or default_workers(),
            tmp_path,
            advance if bar is not None else None,
        )
    finally:
        if bar is not None:
            bar.render_finish()
    click.echo(f"Done. Stored metadata for {count} files.")
