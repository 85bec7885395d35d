"""energon's `BaseCoreDatasetFactory`: the abstract base of every dataset factory (`len()` = samples of the split
over all ranks, `build()` = the calling worker's core dataset). Its own module so that `config` (our factory) and
`factories` (energon's named factory classes) can both derive from it without an import cycle."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Generic, TypeVar

T_sample = TypeVar("T_sample")


class BaseCoreDatasetFactory(ABC, Generic[T_sample]):
    """Base of all dataset factories; `isinstance(get_dataset_from_config(...), BaseCoreDatasetFactory)` holds."""

    __sample_type__: type | None = None
    paths: list
    subflavors: dict

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def build(self, worker_rotation_offset: int = 0) -> Any: ...


class DatasetLoaderInterface(ABC):
    """energon's interface of a (meta)dataset loader: `get_datasets(training=, split_part=, worker_config=, ...)`
    lists the factories with their blend weights / repetitions; `prepare()` writes on-disk helpers (returns
    their paths); `traverse(split_part=)` lists the leaf datasets."""

    @abstractmethod
    def post_initialize(self, mds_path: Any = None) -> None: ...

    @abstractmethod
    def get_datasets(self, *, training: bool, split_part: str, worker_config, **kwargs) -> Any: ...

    def traverse(self, mds_path: Any = None, *, split_part: str) -> list:
        from energon_arrow.loader.errors import LoaderError

        raise LoaderError(f"{type(self).__name__} has no leaf datasets to traverse (not a metadataset)")

    def prepare(self, split_part: str | None = None) -> tuple | list:
        return ()
