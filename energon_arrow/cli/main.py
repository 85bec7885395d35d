"""Entry point: a click group with one module per subcommand and one-line errors (tracebacks with --debug)."""

from __future__ import annotations

import importlib
import sys

import click

# Each module defines `command` (a click.Command). Order is the order of `--help`.
SUBCOMMAND_MODULES = [
    "energon_arrow.cli.demo",
    "energon_arrow.cli.prepare",
    "energon_arrow.cli.prepare_media",
    "energon_arrow.cli.query",
    "energon_arrow.cli.info",
    "energon_arrow.cli.preprocess",
    "energon_arrow.cli.merge",
    "energon_arrow.cli.lint",
    "energon_arrow.cli.preview",
    "energon_arrow.cli.checkpoint",
    "energon_arrow.cli.analyze_debug",
    "energon_arrow.cli.mount",
]


class CliError(click.ClickException):
    """An error to show as one line without a traceback."""


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
@click.version_option(package_name="energon-arrow")
@click.pass_context
def cli(ctx: click.Context, debug: bool):
    """Prepare, query and load WebDataset and Megatron token datasets (energon and Megatron compatible)."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


for _name in SUBCOMMAND_MODULES:
    cli.add_command(importlib.import_module(_name).command)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    debug = "--debug" in args
    try:
        cli.main(args=args, prog_name="energon-arrow", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("energon-arrow: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        if debug:
            raise
        click.echo(f"energon-arrow: error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("energon-arrow: interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - the CLI's contract: one readable line, non-zero exit
        if debug:
            raise
        message = " ".join(str(exc).split()) or type(exc).__name__
        click.echo(f"energon-arrow: error: {message}", err=True)
        sys.exit(1)
