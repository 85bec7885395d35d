"""The result of `Dataset.sql`: materialised once as Arrow, converted to polars / pandas / Python on demand."""

from __future__ import annotations

import pyarrow as pa


class QueryResult:
    """Rows of one query. `.arrow()` is the Arrow table itself; `.pl()` and `.df()` convert (zero-copy where the
    types allow); `.rows()` gives Python tuples; `len()` counts rows."""

    def __init__(self, table: pa.Table, sql: str):
        self._table = table
        self.sql = sql

    def arrow(self) -> pa.Table:
        return self._table

    to_arrow = arrow

    def pl(self):
        import polars as pl

        return pl.from_arrow(self._table)

    def df(self):
        return self._table.to_pandas()

    def rows(self) -> list[tuple]:
        columns = [c.to_pylist() for c in self._table.columns]
        return list(zip(*columns))

    def scalar(self):
        """The single value of a one-row, one-column result."""
        if self._table.num_rows != 1 or self._table.num_columns != 1:
            raise ValueError(
                f"expected one value, got {self._table.num_rows} rows x {self._table.num_columns} columns"
            )
        return self._table.column(0)[0].as_py()

    @property
    def columns(self) -> list[str]:
        return self._table.column_names

    def __len__(self) -> int:
        return self._table.num_rows

    def __arrow_c_stream__(self, requested_schema=None):
        return self._table.__arrow_c_stream__(requested_schema)

    def __repr__(self) -> str:
        return f"QueryResult({self._table.num_rows} rows: {', '.join(self.columns)})"
