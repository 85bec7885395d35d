"""energon-arrow: prepare and load WebDataset shards and Megatron token datasets with an Arrow core."""

__version__ = "0.1.0"


def __getattr__(name):
    # lazy: importing the package stays cheap; the query layer (DuckDB, pyarrow) loads on first use
    if name == "open_dataset":
        from energon_arrow.query import open_dataset

        return open_dataset
    raise AttributeError(f"module 'energon_arrow' has no attribute {name!r}")
