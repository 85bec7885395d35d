"""document_table / sequence_table / token_sql: the per-document view for polars and DuckDB."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from energon_arrow.adapters import open_storage
from energon_arrow.tokens.table import document_table, sequence_table, token_sql
from tests.tokens.test_reader import EXAMPLE, put


def test_document_table(local_root):
    storage = open_storage(local_root[0])
    prefix = put(storage, "t", EXAMPLE + [[]])
    t = document_table(prefix)
    assert t.column_names == [
        "document",
        "first_sequence",
        "sequences",
        "tokens",
        "byte_offset",
        "byte_length",
    ]
    assert t.to_pydict() == {
        "document": [0, 1, 2, 3],
        "first_sequence": [0, 1, 3, 4],
        "sequences": [1, 2, 1, 0],
        "tokens": [3, 5, 1, 0],
        "byte_offset": [0, 6, 16, 18],
        "byte_length": [6, 10, 2, 0],
    }
    df = pl.from_arrow(t)
    assert df["tokens"].sum() == 9


def test_sequence_table_and_sql(local_root):
    storage = open_storage(local_root[0])
    prefix = put(storage, "m", EXAMPLE, modes=[0, 1, 1, 2])
    s = sequence_table(prefix)
    assert s.to_pydict() == {
        "sequence": [0, 1, 2, 3],
        "document": [0, 1, 1, 2],
        "length": [3, 2, 3, 1],
        "pointer": [0, 6, 10, 16],
        "mode": [0, 1, 1, 2],
    }
    got = token_sql(prefix, "select count(*) as n, sum(tokens) as t, max(sequences) as m from documents")
    assert got.to_pylist() == [{"n": 3, "t": 9, "m": 2}]
    hist = token_sql(prefix, "select mode, sum(length) as tokens from sequences group by mode order by mode")
    assert hist.to_pylist() == [{"mode": 0, "tokens": 3}, {"mode": 1, "tokens": 5}, {"mode": 2, "tokens": 1}]
    assert np.asarray(s["length"]).dtype == np.int32


def test_token_sql_is_read_only_and_explains_errors(local_root):
    import pytest

    from energon_arrow.query.errors import QueryError, ReadOnlyError

    prefix = put(open_storage(local_root[0]), "r", EXAMPLE)
    with pytest.raises(ReadOnlyError, match="COPY"):
        token_sql(prefix, "COPY documents TO '/tmp/x.csv'")
    with pytest.raises(QueryError, match="available views: documents, sequences"):
        token_sql(prefix, "select * from samples")
    with pytest.raises(QueryError):
        token_sql(prefix, "select * from read_csv('/etc/passwd')")


def test_query_cli_on_token_dataset(local_root, capsys):
    import json

    from energon_arrow.cli.main import main

    prefix = put(open_storage(local_root[0]), "c", EXAMPLE)
    for target in (prefix, prefix + ".idx"):
        main(
            [
                "query",
                target,
                "select count(*) as docs, sum(tokens) as tokens from documents",
                "--format",
                "json",
            ]
        )
        assert json.loads(capsys.readouterr().out) == [{"docs": 3, "tokens": 9}]


def test_query_cli_refuses_webdataset_options_on_a_token_dataset(local_root, capsys):
    from energon_arrow.cli.main import main

    prefix = put(open_storage(local_root[0]), "o", EXAMPLE)
    for option in (["--no-verify"], ["--split-config", "other.yaml"]):
        with pytest.raises(SystemExit) as exc:
            main(["query", prefix, "select count(*) from documents", *option])
        assert exc.value.code != 0
        assert "apply to WebDataset indexes" in capsys.readouterr().err
