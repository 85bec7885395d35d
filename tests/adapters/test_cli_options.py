"""`--storage-option KEY=VALUE` / `--storage-options JSON` parsing shared by every subcommand."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from energon_arrow.cli.common import parse_storage_options, storage_options


def test_pairs_values_and_nesting():
    opts = parse_storage_options(
        (
            "endpoint_url=http://127.0.0.1:8333",
            "anon=true",
            "client_kwargs.region_name=eu-west-1",
            "config_kwargs.retries.total_max_attempts=2",
            "key=a=b",  # only the first '=' splits
        ),
        None,
    )
    assert opts == {
        "endpoint_url": "http://127.0.0.1:8333",
        "anon": True,
        "client_kwargs": {"region_name": "eu-west-1"},
        "config_kwargs": {"retries": {"total_max_attempts": 2}},
        "key": "a=b",
    }


def test_credentials_and_names_stay_strings():
    opts = parse_storage_options(
        ("key=12345", "secret=1e10", "token=true", "client_kwargs.region_name=null"), None
    )
    assert opts == {
        "key": "12345",
        "secret": "1e10",
        "token": "true",
        "client_kwargs": {"region_name": "null"},
    }


def test_json_then_pairs_override():
    opts = parse_storage_options(
        ("anon=false", "client_kwargs.verify=false"), '{"anon": true, "client_kwargs": {"region_name": "x"}}'
    )
    assert opts == {"anon": False, "client_kwargs": {"region_name": "x", "verify": False}}


@pytest.mark.parametrize(
    "pairs, as_json, message",
    [
        (("novalue",), None, "expected KEY=VALUE, got 'novalue'"),
        (("=v",), None, "expected KEY=VALUE"),
        ((), "{not json", "not valid JSON at char 1"),
        ((), "[1, 2]", "must be a JSON object"),
        (("a=1", "a.b=2"), None, "'a' is already set to a value"),
        (("a..b=1",), None, "empty key part"),
    ],
)
def test_malformed(pairs, as_json, message):
    with pytest.raises(click.BadParameter, match=message):
        parse_storage_options(pairs, as_json)


def test_decorator_gives_the_command_a_dict_and_errors_are_one_line():
    @click.command()
    @storage_options
    def cmd(storage_options):
        click.echo(repr(storage_options))

    runner = CliRunner()
    ok = runner.invoke(
        cmd, ["--storage-option", "endpoint_url=http://h:1", "--storage-options", '{"anon": true}']
    )
    assert ok.exit_code == 0 and ok.output.strip() == "{'anon': True, 'endpoint_url': 'http://h:1'}"
    bad = runner.invoke(cmd, ["--storage-option", "oops"])
    assert bad.exit_code == 2 and "expected KEY=VALUE" in bad.output
