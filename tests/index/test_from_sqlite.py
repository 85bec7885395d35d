"""energon's index.sqlite read into Arrow: values SQLite stores but the index must not hold are SqliteIndexErrors
naming the file (found by the fuzz suite in tests/reliability; they were UnicodeDecodeError / ArrowInvalid)."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from energon_arrow.index.from_sqlite import SqliteIndexError, read_sqlite_tables
from energon_arrow.index.sqlite_writer import IndexSqliteBuilder
from tests.index.test_sqlite_pages import shard_index


@pytest.fixture
def index_path(tmp_path):
    path = str(tmp_path / "index.sqlite")
    builder = IndexSqliteBuilder(path)
    builder.add_shard(0, "a.tar", shard_index(["k0", "k1"], [["jpg"], ["txt"]], np.random.default_rng(0)))
    builder.finish()
    return path


def test_sound_index_reads(index_path):
    samples, parts = read_sqlite_tables(index_path, "s3://b/ds/.nv-meta/index.sqlite")
    assert samples.column("sample_key").to_pylist() == ["k0", "k1"]
    assert parts.num_rows == 2


@pytest.mark.parametrize(
    "update, message",
    [
        ("UPDATE samples SET sample_key = CAST(x'ff00' AS TEXT) WHERE sample_index = 1", "UTF-8"),
        ("UPDATE sample_parts SET part_name = CAST(x'c3' AS TEXT)", "UTF-8"),
        ("UPDATE samples SET byte_size = 'big'", "wrong type or range"),
        ("UPDATE samples SET tar_file_id = 4294967296", "wrong type or range"),
        ("UPDATE sample_parts SET content_byte_offset = 'x'", "wrong type or range"),
    ],
)
def test_values_of_the_wrong_kind_name_the_file(index_path, update, message):
    with sqlite3.connect(index_path) as db:
        db.execute(update)
    db.close()
    with pytest.raises(SqliteIndexError, match=rf"s3://b/ds/\.nv-meta/index\.sqlite: .*{message}"):
        read_sqlite_tables(index_path, "s3://b/ds/.nv-meta/index.sqlite")
