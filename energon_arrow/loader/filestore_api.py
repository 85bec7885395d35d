"""energon's random-access store interface: `FileStore` (abstract: `store[key] -> (data, SourceInfo)`,
`get(key, sample)`, `get_path()`), `FileStoreDecoder` (abstract `decode(fname, data)`), and the wrappers
`PrimaryFileStore` (keys starting with '.' get the current sample's key as prefix) and `DecodeFileStore`
(decodes every item). The concrete stores (prepared dataset, folder, `SystemFileStore`) are in `filestore`.
`get_media_metadata(key)`: the stored media metadata of a file (energon's; see energon_arrow.media).
As in energon, the stores a cooker receives (`aux:` names and `primary`) decode with the task encoder's decoder
(`decoded_stores`), and `primary` takes '.part' names relative to the sample being cooked."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Generic, TypeVar

from energon_arrow.samples.sample import SourceInfo

T = TypeVar("T")  # the type of the entries a store returns (energon's `FileStore[T]`)


class FileStore(ABC, Generic[T]):
    """A dataset accessed randomly by key (a sample key, `<key>.<part>` or a relative file name)."""

    @abstractmethod
    def __getitem__(self, key: str) -> tuple[T, SourceInfo]: ...

    @abstractmethod
    def get_path(self) -> str: ...

    def get_media_metadata(self, key: str) -> Any:
        """The `MediaMetadataBase` (ImageMetadata / AVMetadata) stored for `key` by prepare's media options."""
        raise NotImplementedError(f"{type(self).__name__} does not support media metadata retrieval")

    def get(self, key: str, sample: Any = None) -> Any:
        """The payload of `key`; records where it came from in `sample.__sources__` when given."""
        data, source = self[key]
        if sample is not None:
            if isinstance(sample, dict):
                sample["__sources__"] = (*(sample.get("__sources__") or ()), source)
            elif hasattr(sample, "__sources__"):
                sample.__sources__ = (*(sample.__sources__ or ()), source)
        return data


class FileStoreDecoder(ABC):
    """Turns the raw bytes of a file read from a FileStore into a value."""

    @abstractmethod
    def decode(self, fname: str, data: bytes) -> Any: ...


class FileStoreWrapper(FileStore[T]):
    """A FileStore over another one (`inner`)."""

    def __init__(self, inner: FileStore):
        self._inner = inner

    def get_path(self) -> str:
        return self._inner.get_path()

    def get_media_metadata(self, key: str) -> Any:
        return self._inner.get_media_metadata(key)


class PrimaryFileStore(FileStoreWrapper[T]):
    """`inner`, where a key starting with '.' (a part name) is taken relative to `current_key`."""

    def __init__(self, inner: FileStore, current_key: str):
        super().__init__(inner)
        self._current_key = current_key

    def _key(self, key: str) -> str:
        return f"{self._current_key}{key}" if key.startswith(".") else key

    def __getitem__(self, key: str) -> tuple[Any, SourceInfo]:
        return self._inner[self._key(key)]

    def get(self, key: str, sample: Any = None) -> Any:
        return self._inner.get(self._key(key), sample)

    def get_media_metadata(self, key: str) -> Any:
        return self._inner.get_media_metadata(self._key(key))


class DecodeFileStore(FileStoreWrapper[Any]):
    """`inner` with `decoder.decode(fname, data)` applied to every item read."""

    def __init__(self, inner: FileStore, *, decoder: FileStoreDecoder):
        super().__init__(inner)
        self.decoder = decoder

    def __getitem__(self, fname: str) -> tuple[Any, SourceInfo]:
        data, source = self._inner[fname]
        return self.decoder.decode(fname, data), source

    def __str__(self) -> str:
        return f"DecodeFileStore(inner={self._inner}, decoder={self.decoder})"


def raw_store(store: Any, fname: str) -> tuple[Any, str, list]:
    """(the undecorated store, the name in it, the decoders to apply in order) behind `store[fname]`: a cache
    pool reads and caches the raw bytes and decodes when the entry is used, as energon's pools do."""
    decoders: list = []
    while isinstance(store, FileStoreWrapper):
        if isinstance(store, PrimaryFileStore):
            fname = store._key(fname)
        elif isinstance(store, DecodeFileStore):
            decoders.insert(0, store.decoder)
        store = store._inner
    return store, fname, decoders


def decoded_stores(stores: dict, decoder: Any) -> dict:
    """The aux stores handed to cookers: each decoding what it reads with the task encoder's `decoder`
    (energon's DecodeFileStore), or as they are when the decoder is None (raw bytes)."""
    if decoder is None:
        return dict(stores)
    return {name: DecodeFileStore(store, decoder=decoder) for name, store in stores.items()}
