"""Mirrors `megatron.energon.cache`: the same public names, from where energon_arrow implements them."""

from energon_arrow.energon.cache_pool import (
    CachePool,
    DirectLazy,
    FileCacheLazy,
    FileStoreCachePool,
    Lazy,
    MockLazy,
    NoCachePool,
)
from energon_arrow.loader.filestore import SystemFileStore
from energon_arrow.loader.filestore_api import DecodeFileStore, FileStore, FileStoreDecoder, PrimaryFileStore

__all__ = [
    "CachePool",
    "DecodeFileStore",
    "DirectLazy",
    "FileCacheLazy",
    "FileStore",
    "FileStoreCachePool",
    "FileStoreDecoder",
    "Lazy",
    "MockLazy",
    "NoCachePool",
    "PrimaryFileStore",
    "SystemFileStore",
]
