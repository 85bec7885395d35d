"""energon's `BaseCoreDatasetFactory`: the abstract base of every dataset factory (`len()` = samples of the split
over all ranks, `build()` = the calling worker's core dataset). Its own module so that `config` (our factory) and
`factories` (energon's named factory classes) can both derive from it without an import cycle."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any


class BaseCoreDatasetFactory(ABC):
    """Base of all dataset factories; `isinstance(get_dataset_from_config(...), BaseCoreDatasetFactory)` holds."""

    __sample_type__: type | None = None
    paths: list
    subflavors: dict

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def build(self, worker_rotation_offset: int = 0) -> Any: ...
