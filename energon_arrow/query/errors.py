"""Errors of the query layer. Each message names the dataset (or the statement) and says what to do."""

from __future__ import annotations


class QueryError(ValueError):
    """A statement could not be run: malformed SQL, unknown view or column, a refused statement."""


class ReadOnlyError(QueryError):
    """The statement would modify the catalog, attach databases, install extensions or write files."""


class NotPreparedError(ValueError):
    """The dataset has no index this layer can read."""


class StaleIndexError(ValueError):
    """The side index no longer describes the shards on storage."""


class DanglingReferenceError(ValueError):
    """References that resolve to no auxiliary file (raised only when asked to)."""
