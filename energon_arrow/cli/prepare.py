"""`energon-arrow prepare PATH_OR_URL`: energon's `prepare` options, faster, incremental, safe (docs/prepare.md)."""

from __future__ import annotations

import click

from energon_arrow.cli.common import storage_options
from energon_arrow.cli.prepare_ui import abort_exits_1
from energon_arrow.meta import DATASET_YAML


def _dataset_yaml(sample_type, field_map, skip, interactive, interactive_parts, quiet):
    """The dataset yaml to write (None: none), asking energon's questions when interactive."""
    from energon_arrow.cli.prepare_ui import ask_dataset_yaml, ask_field_map
    from energon_arrow.meta import (
        CRUDE,
        check_sample_type,
        crude_dataset,
        field_map_dataset,
        parse_field_map,
        sample_loader_dataset,
    )

    if skip:
        return None
    if sample_type is not None:
        check_sample_type(sample_type)
        if sample_type == CRUDE:
            return crude_dataset()
        if field_map is not None:
            return field_map_dataset(sample_type, parse_field_map(field_map))
        if interactive:  # energon asks for the field map of a type given on the command line
            return ask_field_map(sample_type, interactive_parts()[0])
        return sample_loader_dataset(sample_type)
    if field_map is not None:
        raise click.UsageError("--field-map needs --sample-type")
    if not interactive:
        if not quiet:
            click.echo("Skipping dataset.yaml creation (use --sample-type to create it).")
        return None
    return ask_dataset_yaml(*interactive_parts())


def _prepare_jsonl(path, storage_options, *dataset_options) -> None:
    """A crude JSONL dataset: only its `.jsonl.idx` index (energon's `prepare` of a .jsonl file)."""
    from energon_arrow.index.jsonl_index import prepare_jsonl

    if any(dataset_options):
        raise click.UsageError(
            "a .jsonl dataset has no splits, excludes, dataset.yaml or index.sqlite: only its index is written; "
            "select parts of it with a metadataset subset"
        )
    click.echo("Preparing jsonl dataset...")
    n = prepare_jsonl(path, storage_options)
    click.echo(f"Done. Found {n} samples.")


def media_filter_options(fn):
    """energon's three `--media-metadata-by-...` options (prepare and prepare-media)."""
    fn = click.option(
        "--media-metadata-by-extension", is_flag=True, help="Media detection by standard file extensions."
    )(fn)
    fn = click.option(
        "--media-metadata-by-header", is_flag=True, help="Media detection by binary file header."
    )(fn)
    return click.option(
        "--media-metadata-by-glob",
        metavar="PATTERNS",
        help="Media detection by using one or more glob patterns such as '*.jpg'. Separate multiple patterns by "
        "commas.",
    )(fn)


def parse_media_filter(glob, header, extension, required: bool = False):
    """The MediaFilterConfig of the options (None when none is given and not `required`); usage errors as energon's."""
    if glob is None and not header and not extension and not required:
        return None
    from energon_arrow.index.media_extract import MediaFilterConfig

    try:
        return MediaFilterConfig.parse(glob, header, extension)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def _prepare_metadataset(path, storage_options, *dataset_options) -> None:
    """A metadataset YAML: check its splits and write the join indexes energon needs (energon's `prepare` of a
    .yaml file)."""
    from energon_arrow.energon.metadataset_api import prepare_metadataset

    if any(dataset_options):
        raise click.UsageError(
            "a metadataset YAML has no shards to index: splits, excludes and dataset.yaml options apply to the "
            "datasets it names"
        )
    click.echo("Preparing metadataset...")
    files = prepare_metadataset(path, storage_options)
    click.echo(f"Prepared {path}: {len(files)} join index file(s)")
    for name in files:
        click.echo(f"  {name}")


@click.command(name="prepare")
@click.argument("path")
@click.option("--progress/--no-progress", default=True, help="Show a progress bar (on stderr).")
@click.option(
    "--split-parts",
    multiple=True,
    metavar="NAME:REGEX",
    help="Shards of a split by regex on their relative path (repeatable); replaces --split-ratio.",
)
@click.option(
    "--exclude", metavar="REGEX", help="Leave out tar files whose relative path matches (re.search)."
)
@click.option(
    "--num-workers",
    type=int,
    default=0,
    show_default="one per CPU, at most 16",
    help="Parallel shard readers (processes for local shards, streams for object stores).",
)
@click.option(
    "--tar-index-only", is_flag=True, help="Only (re)write the .tar.idx files of the indexed shards."
)
@click.option(
    "--shuffle-tars", is_flag=True, help="Shuffle shards (seed 42, like energon) before the ratio split."
)
@click.option("--non-interactive", is_flag=True, help="Never ask; missing choices are errors or skipped.")
@click.option("--split-ratio", metavar="TRAIN,VAL,TEST", help='Split by whole shards, e.g. "8,1,1".')
@click.option(
    "--force-overwrite",
    is_flag=True,
    help="Re-index every shard (default: re-index only new or changed shards of a prepared dataset).",
)
@click.option("--skip-dataset-yaml", is_flag=True, help="Do not write dataset.yaml.")
@click.option(
    "--dataset-yaml-name", default=DATASET_YAML, show_default=True, help="Name of the dataset yaml."
)
@click.option(
    "--sample-type", metavar="CLASS", help="energon sample type (e.g. CaptioningSample, CrudeWebdataset)."
)
@click.option("--field-map", metavar="JSON", help='Field map, e.g. \'{"image": "jpg", "caption": "txt"}\'.')
@click.option(
    "--tmp-path", type=click.Path(file_okay=False), help="Where to build index.sqlite before publishing."
)
@click.option(
    "--skip-bad-shards", is_flag=True, help="Leave out unreadable shards (reported) instead of failing."
)
@click.option(
    "--energon-index/--no-energon-index",
    default=True,
    show_default=True,
    help="Write index.sqlite, energon's sample tables. --no-energon-index skips it (faster, less disk at "
    "100M samples) for datasets that only energon-arrow loads: energon can then only iterate the dataset; its "
    "joins (join:), file stores (aux:), lookups by key and `energon mount` FAIL without index.sqlite. "
    "`energon-arrow info` and `lint` report the mode.",
)
@media_filter_options
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON on stdout.")
@storage_options
@abort_exits_1
def command(
    path,
    progress,
    split_parts,
    exclude,
    num_workers,
    tar_index_only,
    shuffle_tars,
    non_interactive,
    split_ratio,
    force_overwrite,
    skip_dataset_yaml,
    dataset_yaml_name,
    sample_type,
    field_map,
    tmp_path,
    skip_bad_shards,
    energon_index,
    media_metadata_by_glob,
    media_metadata_by_header,
    media_metadata_by_extension,
    as_json,
    storage_options,
):
    """Index the WebDataset tar shards under PATH_OR_URL (local folder or s3://bucket/prefix) for energon.

    Writes energon's .nv-meta (.info.json, split.yaml, dataset.yaml, index.sqlite, index.uuid), a .tar.idx next
    to every shard and Parquet side indexes under .nv-meta/arrow/. Runs under torchrun too (each rank indexes
    its share of the shards, rank 0 writes the index). Resumable: a prepare that was killed or failed keeps the
    shards it indexed in .nv-meta/.prepare-work/ and the next run continues from them. A PATH ending in .jsonl
    gets its .jsonl.idx index; a metadataset .yaml is checked and gets the join indexes energon needs.
    """
    # heavy imports here, so `energon-arrow --help` and other subcommands start fast
    from energon_arrow.adapters import open_storage
    from energon_arrow.cli.prepare_ui import ask_override_sample_loader, ask_split_ratio, echo_summary
    from energon_arrow.index.discover import discover_shards
    from energon_arrow.index.distributed import prepare_distributed
    from energon_arrow.index.prepare import PrepareOptions
    from energon_arrow.meta import (
        META_DIR,
        SAMPLE_LOADER_PY,
        info_exists,
        parse_split_parts,
        parse_split_ratio,
        sample_loader_py,
    )
    from energon_arrow.tar import index_shard

    if tar_index_only and not energon_index:
        raise click.UsageError(
            "--no-energon-index applies to a full prepare; --tar-index-only rewrites only the .tar.idx files"
        )
    media_filter = parse_media_filter(
        media_metadata_by_glob, media_metadata_by_header, media_metadata_by_extension
    )
    if media_filter is not None:
        if tar_index_only:
            raise click.UsageError("--media-metadata-by-... cannot be combined with --tar-index-only")
        if str(path).endswith(".yaml"):
            raise click.ClickException(
                "Metadatasets cannot store media metadata. Remove --media-metadata-by-... to continue."
            )
        if str(path).endswith(".jsonl"):
            raise click.ClickException(
                "JSONL datasets do not support media metadata. Remove --media-metadata-by-... to continue."
            )
        if not energon_index:
            raise click.UsageError(
                "--media-metadata-by-... writes index.sqlite: it cannot be combined with --no-energon-index"
            )
    # the options of a shard folder, which a metadataset or a .jsonl file does not take
    folder_options = (split_parts, split_ratio, exclude, sample_type, field_map, not energon_index)
    if str(path).endswith((".yaml", ".yml")):
        _prepare_metadataset(path, storage_options, *folder_options, tar_index_only)
        return
    if str(path).endswith(".jsonl"):
        _prepare_jsonl(path, storage_options, *folder_options)
        return
    # like energon, the questions are asked unless --non-interactive, also with answers piped on stdin
    interactive = not non_interactive
    storage = open_storage(path, storage_options)
    options = PrepareOptions(
        exclude=exclude,
        num_workers=num_workers,
        force=force_overwrite,
        skip_bad_shards=skip_bad_shards,
        tar_index_only=tar_index_only,
        shuffle_tars=shuffle_tars,
        dataset_yaml_name=dataset_yaml_name,
        tmp_path=tmp_path,
        energon_index=energon_index,
        media_filter=media_filter,
    )
    override_loader = False
    if not tar_index_only:
        if (
            info_exists(storage)
            and not force_overwrite
            and interactive
            and not click.confirm("It seems the dataset had already been prepared. Do you want to continue?")
        ):
            return
        if split_parts:
            options.split_parts = parse_split_parts(list(split_parts))
        else:
            if split_ratio is None and interactive:
                split_ratio = ask_split_ratio()
            if split_ratio is None:  # energon: exit 1
                raise click.ClickException(
                    "--split-ratio is required in non-interactive mode (unless --split-parts or "
                    "--tar-index-only is used)"
                )
            options.split_ratio = parse_split_ratio(split_ratio)

        def first_shard_parts():
            shards, _ = discover_shards(storage, exclude)
            if not shards:
                return [], "(none)"
            return index_shard(storage, shards[0].path, shards[0].size).part_types(), shards[0].path

        options.dataset_yaml = _dataset_yaml(
            sample_type, field_map, skip_dataset_yaml, interactive, first_shard_parts, as_json
        )
        override_loader = (
            interactive
            and options.dataset_yaml is not None
            and bool(options.dataset_yaml.sample_loader)
            and storage.exists(f"{META_DIR}/{SAMPLE_LOADER_PY}")
            and ask_override_sample_loader()
        )
    bar = None
    if progress and not as_json:
        from rich.console import Console

        from energon_arrow.cli.prepare_progress import ShardProgress

        bar = ShardProgress(Console(stderr=True))
    try:
        result = prepare_distributed(storage, options, progress=bar)
    finally:
        if bar is not None:
            bar.stop()
    if result is None:  # a rank other than 0 of a distributed prepare
        return
    if override_loader:
        storage.write_atomic(
            f"{META_DIR}/{SAMPLE_LOADER_PY}",
            sample_loader_py(options.dataset_yaml.sample_type, sorted(result.part_types)),
        )
    echo_summary(result, as_json)
    if not as_json and not tar_index_only:
        if options.dataset_yaml is None and not storage.exists(f"{META_DIR}/{dataset_yaml_name}"):
            click.echo("You will have to add a dataset.yaml manually.")
        click.echo("Done")
