"""SQL over dataset indexes (DuckDB): `open_dataset(url).sql(...)`, splits, exclusions, joins."""

from energon_arrow.query.dataset import Dataset, open_dataset
from energon_arrow.query.errors import (
    DanglingReferenceError,
    NotPreparedError,
    QueryError,
    ReadOnlyError,
    StaleIndexError,
)
from energon_arrow.query.result import QueryResult

__all__ = [
    "DanglingReferenceError",
    "Dataset",
    "NotPreparedError",
    "QueryError",
    "QueryResult",
    "ReadOnlyError",
    "StaleIndexError",
    "open_dataset",
]
