"""Options shared by subcommands: storage options for S3 and friends, JSON output."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable

import click

# options that are always strings: a secret like "123" or "1e10" must not turn into a number
_STRING_OPTIONS = {
    "key",
    "secret",
    "token",
    "aws_access_key_id",
    "aws_secret_access_key",
    "aws_session_token",
    "password",
    "profile",
    "endpoint_url",
    "region_name",
    "region",
}


def _parse_value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_storage_options(pairs: tuple[str, ...], as_json: str | None) -> dict:
    """Merge `--storage-options JSON` with repeated `--storage-option KEY=VALUE` (dotted keys nest)."""
    options: dict = {}
    if as_json:
        try:
            options = json.loads(as_json)
        except json.JSONDecodeError as exc:
            raise click.BadParameter(
                f"not valid JSON at char {exc.pos}: {exc.msg}", param_hint="--storage-options"
            ) from None
        if not isinstance(options, dict):
            raise click.BadParameter("must be a JSON object", param_hint="--storage-options") from None
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--storage-option")
        *parents, leaf = key.split(".")
        if not all([*parents, leaf]):
            raise click.BadParameter(f"empty key part in {key!r}", param_hint="--storage-option")
        target = options
        for depth, p in enumerate(parents):
            target = target.setdefault(p, {})
            if not isinstance(target, dict):
                where = ".".join(parents[: depth + 1])
                raise click.BadParameter(
                    f"{where!r} is already set to a value, cannot set {key!r}", param_hint="--storage-option"
                )
        target[leaf] = value if leaf in _STRING_OPTIONS else _parse_value(value)
    return options


# flags for energon-arrow's own storage options (adapters.io_settings), added to the storage options when given
_IO_FLAGS = {
    "retries": (
        click.IntRange(0),
        "Retries of a failed storage request (default 4; env ENERGON_ARROW_RETRIES).",
    ),
    "retry_deadline_s": (
        click.FloatRange(0, min_open=True),
        "Keep retrying a failed request for this many seconds (outages shorter than this are waited out; "
        "default none; env ENERGON_ARROW_RETRY_DEADLINE_S).",
    ),
    "connect_timeout": (click.FloatRange(0, min_open=True), "S3: seconds to connect (default 5)."),
    "read_timeout": (click.FloatRange(0, min_open=True), "S3: seconds without a byte (default 15)."),
    "upload_checksum": (
        click.Choice(["md5", "crc32", "none"]),
        "S3: checksum every upload carries for the store to verify (default md5).",
    ),
}


def storage_options(fn: Callable) -> Callable:
    """Add --storage-option/--storage-options and the retry/timeout/checksum flags; the command receives
    `storage_options: dict`."""

    @functools.wraps(fn)
    def wrapper(*args, storage_option_pairs=(), storage_options_json=None, **kwargs):
        options = parse_storage_options(storage_option_pairs, storage_options_json)
        for name in _IO_FLAGS:
            value = kwargs.pop(f"io_{name}", None)
            if value is not None:
                options[name] = value
        return fn(*args, storage_options=options, **kwargs)

    for name, (kind, text) in _IO_FLAGS.items():
        flag = "--" + name.replace("_", "-")
        wrapper = click.option(flag, f"io_{name}", type=kind, default=None, help=text)(wrapper)

    wrapper = click.option(
        "--storage-options",
        "storage_options_json",
        default=None,
        metavar="JSON",
        help='Storage options as a JSON object, e.g. \'{"endpoint_url": "http://127.0.0.1:8333"}\'.',
    )(wrapper)
    return click.option(
        "--storage-option",
        "storage_option_pairs",
        multiple=True,
        metavar="KEY=VALUE",
        help="One storage option (repeatable): endpoint_url=http://127.0.0.1:8333, client_kwargs.region_name=x.",
    )(wrapper)


def query_limits(fn: Callable) -> Callable:
    """Add --memory-limit/--temp-directory/--threads (DuckDB); the command receives `limits: QueryLimits`."""

    @functools.wraps(fn)
    def wrapper(*args, memory_limit=None, temp_directory=None, threads=None, **kwargs):
        from energon_arrow.query.limits import QueryLimits

        return fn(*args, limits=QueryLimits(memory_limit, temp_directory, threads), **kwargs)

    wrapper = click.option(
        "--threads", type=click.IntRange(1), default=None, help="DuckDB threads (default: one per CPU)."
    )(wrapper)
    wrapper = click.option(
        "--temp-directory",
        default=None,
        metavar="DIR",
        help="Where DuckDB spills what does not fit in --memory-limit (default: a private folder in the system "
        "temp folder; env ENERGON_ARROW_QUERY_TEMP_DIRECTORY).",
    )(wrapper)
    return click.option(
        "--memory-limit",
        default=None,
        metavar="SIZE",
        help="DuckDB memory limit, e.g. 2GB (default: half the RAM, at most 4 GiB; env "
        "ENERGON_ARROW_QUERY_MEMORY_LIMIT); larger intermediate results spill to --temp-directory.",
    )(wrapper)


def not_provided(name: str, reason: str, doc: str) -> click.Command:
    """An energon command energon-arrow does not provide: takes whatever arguments energon's takes and exits 1 with
    `reason` (one readable line), instead of accepting them and doing something else; `doc` is its help text."""

    def command(energon_args):
        raise click.ClickException(reason)

    command.__doc__ = doc
    return click.command(
        name=name, context_settings={"ignore_unknown_options": True, "allow_extra_args": True}
    )(click.argument("energon_args", nargs=-1, type=click.UNPROCESSED)(command))
