"""SQL over dataset indexes (DuckDB): `open_dataset(url).sql(...)`, splits, exclusions, joins."""

from energon_arrow.query.dataset import Dataset, open_dataset
from energon_arrow.query.errors import (
    DanglingReferenceError,
    NotPreparedError,
    QueryError,
    ReadOnlyError,
    StaleIndexError,
)
from energon_arrow.query.join import JoinMember, join_datasets, join_index_bytes
from energon_arrow.query.limits import QueryLimits
from energon_arrow.query.result import QueryResult

__all__ = [
    "DanglingReferenceError",
    "Dataset",
    "JoinMember",
    "NotPreparedError",
    "QueryError",
    "QueryLimits",
    "QueryResult",
    "ReadOnlyError",
    "StaleIndexError",
    "join_datasets",
    "join_index_bytes",
    "open_dataset",
]
