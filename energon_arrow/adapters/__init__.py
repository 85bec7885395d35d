"""Storage adapters: every byte energon-arrow reads or writes goes through `Storage`."""

from energon_arrow.adapters.errors import (
    AccessDenied,
    InvalidStorageOptions,
    NotFound,
    NotLocal,
    ObjectChanged,
    StorageError,
    TransientError,
    UnsupportedScheme,
)
from energon_arrow.adapters.listing import FileInfo
from energon_arrow.adapters.retry import NO_RETRY, RetryPolicy
from energon_arrow.adapters.storage import Storage, open_storage

__all__ = [
    "AccessDenied",
    "FileInfo",
    "InvalidStorageOptions",
    "NO_RETRY",
    "NotFound",
    "NotLocal",
    "ObjectChanged",
    "RetryPolicy",
    "Storage",
    "StorageError",
    "TransientError",
    "UnsupportedScheme",
    "open_storage",
]
