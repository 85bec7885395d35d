"""Mirrors `megatron.energon.cache.base`: the same public names, from where energon_arrow implements them."""

from energon_arrow.energon.cache_pool import CachePool, Lazy, MockLazy
from energon_arrow.loader.filestore_api import FileStore, FileStoreDecoder, FileStoreWrapper, PrimaryFileStore

__all__ = [
    "CachePool",
    "FileStore",
    "FileStoreDecoder",
    "FileStoreWrapper",
    "Lazy",
    "MockLazy",
    "PrimaryFileStore",
]
