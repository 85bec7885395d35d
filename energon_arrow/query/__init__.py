"""SQL over dataset indexes (DuckDB): `open_dataset(url).sql(...)`, splits, exclusions, joins.

The names are imported on first use, so that modules of this package which need no DuckDB (e.g. `sideindex`,
read by prepare after publishing) do not import it."""

from importlib import import_module

_HOMES = {
    "Dataset": "dataset",
    "open_dataset": "dataset",
    "DanglingReferenceError": "errors",
    "NotPreparedError": "errors",
    "QueryError": "errors",
    "ReadOnlyError": "errors",
    "StaleIndexError": "errors",
    "JoinMember": "join",
    "join_datasets": "join",
    "join_index_bytes": "join",
    "QueryLimits": "limits",
    "QueryResult": "result",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_HOMES))
