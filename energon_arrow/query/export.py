"""Render a query result as a readable table, CSV, JSON, Parquet or Arrow IPC (bytes or text)."""

from __future__ import annotations

import contextlib
import datetime
import decimal
import io
import json

import pyarrow as pa

FORMATS = ("table", "csv", "json", "parquet", "arrow")
BINARY_FORMATS = ("parquet", "arrow")


def _plain(value):
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    if isinstance(value, datetime.date | datetime.datetime | datetime.time | datetime.timedelta):
        return str(value)
    return value


def _json_safe(obj):
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_json_safe(v) for v in obj]
    return _plain(obj)


def to_json(table: pa.Table) -> str:
    return json.dumps(_json_safe(table.to_pylist()), indent=2, ensure_ascii=False)


def to_csv(table: pa.Table) -> str:
    import pyarrow.csv as pacsv

    buf = io.BytesIO()
    simple = pa.table(
        {
            name: col.cast(pa.string()) if not _csv_writable(col.type) else col
            for name, col in zip(table.column_names, table.columns)
        }
    )
    pacsv.write_csv(simple, buf)
    return buf.getvalue().decode()


def _csv_writable(t: pa.DataType) -> bool:
    return not (pa.types.is_nested(t) or pa.types.is_dictionary(t) or pa.types.is_decimal(t))


def to_table_text(table: pa.Table, max_rows: int = 50, max_width: int = 48) -> str:
    """A plain aligned table: header, rule, up to `max_rows` rows, and a row-count footer."""
    shown = table.slice(0, max_rows)
    header = table.column_names
    cols = [[_cell(v, max_width) for v in c.to_pylist()] for c in shown.columns]
    widths = [max([len(h), *(len(v) for v in col)]) for h, col in zip(header, cols)]
    numeric = [
        pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
        for t in shown.schema.types
    ]

    def fmt(values):
        return "  ".join(
            v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)
        ).rstrip()

    lines = [fmt(header), "  ".join("-" * w for w in widths)]
    lines += [fmt(row) for row in zip(*cols)] if cols else []
    more = table.num_rows - shown.num_rows
    lines.append(
        f"({table.num_rows:,} row{'s' if table.num_rows != 1 else ''}"
        + (f", {more:,} not shown)" if more else ")")
    )
    return "\n".join(lines)


def _cell(value, max_width: int) -> str:
    text = "NULL" if value is None else str(_plain(value))
    text = text.replace("\n", "\\n")
    return text if len(text) <= max_width else text[: max_width - 3] + "..."


def _integral_decimals(table: pa.Table) -> pa.Table:
    """DuckDB sums integers into DECIMAL(38,0); show those as int64 when they fit."""
    for i, field in enumerate(table.schema):
        if pa.types.is_decimal(field.type) and field.type.scale == 0:
            with contextlib.suppress(pa.ArrowInvalid):
                table = table.set_column(i, field.name, table.column(i).cast(pa.int64()))
    return table


def render(table: pa.Table, fmt: str, max_rows: int = 50) -> bytes:
    """The result in format `fmt` as bytes (text formats are UTF-8)."""
    table = _integral_decimals(table)
    if fmt == "table":
        return (to_table_text(table, max_rows) + "\n").encode()
    if fmt == "csv":
        return to_csv(table).encode()
    if fmt == "json":
        return (to_json(table) + "\n").encode()
    buf = io.BytesIO()
    if fmt == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, buf, compression="zstd")
    elif fmt == "arrow":
        with pa.ipc.new_file(buf, table.schema) as writer:
            writer.write_table(table)
    else:
        raise ValueError(f"unknown format {fmt!r} (one of {', '.join(FORMATS)})")
    return buf.getvalue()
