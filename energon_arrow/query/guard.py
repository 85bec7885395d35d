"""The read-only contract of the query catalog, and readable errors for failed statements.

Two layers: statements are classified with DuckDB's own parser and anything but reads is refused by name; the
connection itself runs with external access off (only the side-index files are allowed) and a locked
configuration, so a read cannot reach other files either.
"""

from __future__ import annotations

import duckdb

from energon_arrow.query.errors import QueryError, ReadOnlyError

ALLOWED = {"SELECT", "EXPLAIN", "PRAGMA", "CALL"}

_WHY = {
    "INSERT": "modify the dataset",
    "UPDATE": "modify the dataset",
    "DELETE": "modify the dataset",
    "CREATE": "modify the catalog",
    "DROP": "modify the catalog",
    "ALTER": "modify the catalog",
    "ATTACH": "attach another database",
    "DETACH": "detach a database",
    "LOAD": "install or load an extension",
    "COPY": "write files (use --output / .arrow() / .pl() instead)",
    "EXPORT": "write files",
    "SET": "change the configuration",
    "VARIABLE_SET": "change the configuration",
}


def check_read_only(con: duckdb.DuckDBPyConnection, sql: str) -> None:
    """Raise ReadOnlyError if any statement of `sql` is not a read; QueryError if it does not parse."""
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(f"malformed SQL: {_first_lines(exc)}\n  in: {sql.strip()}") from None
    if not statements:
        raise QueryError("empty statement")
    for st in statements:
        kind = st.type.name
        if kind not in ALLOWED:
            why = _WHY.get(kind, "do more than read")
            raise ReadOnlyError(
                f"refused {kind} statement: the dataset catalog is read-only and this statement would {why}\n"
                f"  in: {st.query.strip()}"
            )


def _first_lines(exc: Exception) -> str:
    return str(exc).strip()


def explain_error(exc: duckdb.Error, sql: str, views: dict[str, list[str]]) -> QueryError:
    """A QueryError carrying DuckDB's message, the statement and, for unknown names, what is available."""
    message = _first_lines(exc)
    hint = ""
    if isinstance(exc, duckdb.CatalogException) and "Table with name" in message:
        hint = "\n  available views: " + ", ".join(sorted(views))
    elif isinstance(exc, duckdb.BinderException) and ("column" in message.lower()):
        hint = "\n  columns: " + "; ".join(f"{v}({', '.join(cols)})" for v, cols in sorted(views.items()))
    elif isinstance(exc, duckdb.PermissionException):
        hint = "\n  the catalog reads only the dataset's own index files"
    kind = "malformed SQL" if isinstance(exc, duckdb.ParserException) else "query failed"
    return QueryError(f"{kind}: {message}{hint}\n  in: {sql.strip()}")
