"""Arrow tables over a token dataset's index, for polars and DuckDB (`energon-arrow query` on token data).

`document_table(ds)`: one row per document (document, first_sequence, sequences, tokens, byte_offset,
byte_length). `sequence_table(ds)`: one row per sequence (sequence, document, length, pointer[, mode]).
`token_sql(ds, sql)` runs SQL with both registered as the views `documents` and `sequences`.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from energon_arrow.tokens.indexed import IndexedTokens


def _open(ds, storage_options=None) -> IndexedTokens:
    return ds if isinstance(ds, IndexedTokens) else IndexedTokens(ds, storage_options)


def _aligned(values, dtype) -> pa.Array:
    """An Arrow array over `values`; copied only where the memory map leaves them unaligned (the .idx arrays
    start at byte 34), which Arrow's compute engine warns about and some hardware faults on."""
    return pa.array(np.require(np.asarray(values, dtype), requirements="A"))


def document_table(ds, storage_options=None) -> pa.Table:
    """Per-document lengths and byte extents (int64 columns) of a dataset or prefix."""
    ds = _open(ds, storage_options)
    di = np.asarray(ds.document_indices, np.int64)
    first, last = di[:-1], di[1:]
    tokens = ds.document_lengths()
    ptr_ext = np.append(np.asarray(ds.sequence_pointers, np.int64), ds.num_tokens * ds.dtype.itemsize)
    return pa.table(
        {
            "document": pa.array(np.arange(first.size, dtype=np.int64)),
            "first_sequence": _aligned(first, np.int64),
            "sequences": pa.array(last - first),
            "tokens": _aligned(tokens, np.int64),
            "byte_offset": pa.array(ptr_ext[first]),
            "byte_length": pa.array(tokens * ds.dtype.itemsize),
        }
    )


def sequence_table(ds, storage_options=None) -> pa.Table:
    """Per-sequence rows: sequence id, owning document, length (tokens), pointer (bytes), mode if multimodal."""
    ds = _open(ds, storage_options)
    n = len(ds)
    di = np.asarray(ds.document_indices, np.int64)
    document = np.repeat(np.arange(di.size - 1, dtype=np.int64), np.diff(di))
    cols = {
        "sequence": pa.array(np.arange(n, dtype=np.int64)),
        "document": pa.array(document),
        "length": _aligned(ds.sequence_lengths, np.int32),
        "pointer": _aligned(ds.sequence_pointers, np.int64),
    }
    if ds.multimodal:
        cols["mode"] = _aligned(ds.sequence_modes, np.int8)
    return pa.table(cols)


def token_sql(ds, sql: str, storage_options=None, limits=None) -> pa.Table:
    """Run read-only DuckDB SQL over the views `documents` and `sequences` of a token dataset (the same
    read-only contract as the WebDataset catalog: only reads, no file access, locked configuration, and the
    same memory limit / spill folder / threads: `limits`, a `QueryLimits`, defaults when None)."""
    import duckdb

    from energon_arrow.query.catalog import DUCKDB_CONFIG
    from energon_arrow.query.guard import check_read_only, explain_error
    from energon_arrow.query.limits import QueryLimits

    ds = _open(ds, storage_options)
    views = {"documents": document_table(ds), "sequences": sequence_table(ds)}
    con = duckdb.connect(":memory:", config=DUCKDB_CONFIG)
    try:
        (limits or QueryLimits()).apply(con)
        for name, table in views.items():
            con.register(name, table)
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
        check_read_only(con, sql)
        try:
            return con.sql(sql).to_arrow_table()
        except duckdb.Error as exc:
            raise explain_error(exc, sql, {n: t.column_names for n, t in views.items()}) from None
    finally:
        con.close()
