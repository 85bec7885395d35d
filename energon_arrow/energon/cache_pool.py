"""energon 7.4's cache pools for aux data read by cookers: `NoCachePool`, `FileStoreCachePool`, `Lazy`.

A cooker marked `@cooker(need_cache=True)` receives the loader's pool as `cache=` (also `TaskEncoder.cache`):

- `cache.get(store, name, sample=None)`: the entry now (its source recorded in `sample.__sources__`);
- `cache.get_lazy(store, name)`: a `Lazy` whose `get(sample=None)` returns the entry later. `FileStoreCachePool`
  starts reading it at once in a background thread and spills it to a local cache folder, so a cooker can ask
  for many aux files up front and the reads overlap; names of a prepared dataset (`PartStore`) that queue up
  while the threads are busy are read together (`PartStore.get_many`: coalesced, concurrent range reads);
- `cache.to_cache(data, name)`: move `data` (any picklable object) to the cache; a `Lazy` brings it back.

`FileStoreCachePool` is bounded: at most `max_cache_size_gbytes` / `max_cache_count` of spilled entries per
process (each DataLoader worker has its own pool after the fork, its own files and its own threads); an entry
that does not fit stays in memory until it is read. A spilled file is written under a temporary name and renamed
(never read half-written) and deleted when the last `Lazy` referring to it is dropped; the pool's folder is
removed by `close()` (or at exit of the process that created it).
"""

from __future__ import annotations

import itertools
import os
import pickle
import shutil
import tempfile
import threading
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

from energon_arrow.loader.errors import LoaderError
from energon_arrow.loader.filestore_api import raw_store

T = TypeVar("T")  # the type of the data a Lazy returns (energon's `Lazy[T]`)


def _remove_folder(path: str, owner: int) -> None:
    """Remove the pool's folder, only in the process that made it (never from a forked worker)."""
    if os.getpid() == owner:
        shutil.rmtree(path, ignore_errors=True)


def active_pool() -> CachePool:
    """The cache pool of the loader calling a cooker (get_loader / get_savable_loader(cache_pool=...))."""
    from energon_arrow.energon.worker_config import WorkerConfig

    pool = WorkerConfig._cache_pool
    if pool is None:
        raise LoaderError(
            "a cooker with need_cache=True (or TaskEncoder.cache) needs a cache pool: pass cache_pool="
            "FileStoreCachePool(...) or NoCachePool() to get_loader / get_savable_loader"
        )
    return pool


def check_pool(cache_pool: Any, function: str) -> None:
    if cache_pool is not None and not isinstance(cache_pool, CachePool):
        raise LoaderError(
            f"{function}: cache_pool must be a FileStoreCachePool / NoCachePool (a CachePool), got {cache_pool!r}"
        )


def _add_source(sample: Any, source: Any) -> None:
    if sample is None or source is None:
        return
    if isinstance(sample, dict):
        sample["__sources__"] = (*(sample.get("__sources__") or ()), source)
    elif hasattr(sample, "__sources__"):
        sample.__sources__ = (*(sample.__sources__ or ()), source)


class Lazy(ABC, Generic[T]):
    """A reference to data fetched later: `get(sample=None)` returns it (and records its source in `sample`)."""

    def __init__(self, ds: Any, fname: str, pool: CachePool | None):
        self.ds, self.fname, self.pool = ds, fname, pool

    @abstractmethod
    def get(self, sample: Any = None) -> T: ...

    def __hash__(self) -> int:
        return hash((id(self.ds), self.fname))

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Lazy) and self.ds is other.ds and self.fname == other.fname

    def __repr__(self) -> str:
        return f"{type(self).__name__}(fname={self.fname!r})"


class CachePool(ABC):
    """Where cookers' aux reads go (see the module docstring)."""

    @abstractmethod
    def get(self, ds: Any, fname: str, sample: Any = None) -> Any: ...

    @abstractmethod
    def get_lazy(self, ds: Any, fname: str) -> Lazy: ...

    @abstractmethod
    def to_cache(self, data: Any, name: str) -> Lazy: ...

    @abstractmethod
    def close(self) -> None: ...


class DirectLazy(Lazy[T]):
    """Reads the entry from its store when asked (NoCachePool)."""

    def get(self, sample: Any = None) -> Any:
        return self.ds.get(self.fname, sample)


class MockLazy(Lazy[T]):
    """A Lazy whose data comes from `get_fn(fname)` (energon's MockLazy: no store, no pool, no source info)."""

    def __init__(self, fname: str, get_fn: Callable[[str], Any]):
        super().__init__(None, fname, None)
        self.get_fn = get_fn

    def get(self, sample: Any = None) -> Any:
        return self.get_fn(self.fname)


class _MemoryLazy(Lazy[T]):
    """Data kept in memory (NoCachePool.to_cache, or an entry the cache had no room for)."""

    def __init__(self, data: Any, name: str, source: Any = None, pool: CachePool | None = None):
        super().__init__(None, name, pool)
        self._data, self._source = data, source

    def get(self, sample: Any = None) -> Any:
        _add_source(sample, self._source)
        return self._data


class NoCachePool(CachePool):
    """No cache: every read goes straight to the store."""

    def get(self, ds: Any, fname: str, sample: Any = None) -> Any:
        return ds.get(fname, sample)

    def get_lazy(self, ds: Any, fname: str) -> DirectLazy:
        return DirectLazy(ds, fname, self)

    def to_cache(self, data: Any, name: str) -> Lazy:
        return _MemoryLazy(data, name, pool=self)

    def close(self) -> None:
        return None


class _Entry:
    """One spilled (or in-memory) entry: the future of its fetch and how many Lazy objects refer to it."""

    def __init__(self, future: Future, fname: str = "", decoders: tuple = (), pickled: bool = True):
        self.future, self.refs = future, 0
        self.fname, self.decoders = fname, decoders  # what FileCacheLazy.get decodes the cached bytes with
        self.pickled = pickled  # its cached copy is pickled (else the raw bytes)


class FileCacheLazy(Lazy[T]):
    """An entry of a FileStoreCachePool: waits for its background fetch, then reads the cached copy."""

    def __init__(self, ds: Any, fname: str, pool: FileStoreCachePool, entry: _Entry):
        super().__init__(ds, fname, pool)
        self._entry = entry
        entry.refs += 1
        weakref.finalize(self, pool._release, entry)

    def get(self, sample: Any = None) -> Any:
        path, data, source = self._entry.future.result()
        _add_source(sample, source)
        data = data if path is None else self.pool._read(path, self._entry.pickled)
        for decoder in self._entry.decoders:  # a decoding store: the cache holds the raw bytes
            data = decoder.decode(self._entry.fname, data)
        return data

    def __reduce__(self):
        """Pickled (a DataLoader worker's sample on its way to the main process, which packs and batches): the
        entry's data goes along (read now); the pool, its threads and its cached copy stay in this process."""
        return _MemoryLazy, (self.get(), self.fname, self._entry.future.result()[2])


class FileStoreCachePool(CachePool):
    """A bounded on-disk cache of aux reads, filled by `num_workers` background threads per process.

    `parent_cache_dir`: where the pool's folder is made (default: the system temp folder); `method`: how entries
    read from stores are kept: "raw" stores bytes entries as they are (and refuses non-bytes), "pickle" pickles any
    entry (decoded images, dicts). `to_cache(data)` pickles whatever the method, as energon's does."""

    def __init__(
        self,
        *,
        parent_cache_dir: Path | str | None = None,
        num_workers: int = 8,
        max_cache_size_gbytes: float = 1024,
        max_cache_count: int = 10_000_000,
        method: Literal["raw", "pickle"] = "raw",
    ):
        if method not in ("raw", "pickle"):
            raise LoaderError(f"FileStoreCachePool: method must be 'raw' or 'pickle', got {method!r}")
        if num_workers < 1 or max_cache_count < 1 or max_cache_size_gbytes <= 0:
            raise LoaderError(
                "FileStoreCachePool: num_workers, max_cache_count, max_cache_size_gbytes must be > 0"
            )
        parent = Path(parent_cache_dir) if parent_cache_dir is not None else Path(tempfile.gettempdir())
        parent.mkdir(parents=True, exist_ok=True)
        self.cache_dir = Path(tempfile.mkdtemp(prefix="energon-arrow-cache-", dir=parent))
        self.num_workers, self.method = num_workers, method
        self.max_bytes = int(max_cache_size_gbytes * (1 << 30))
        self.max_count = max_cache_count
        self._owner = os.getpid()
        self._finalizer = weakref.finalize(self, _remove_folder, str(self.cache_dir), self._owner)
        self._reset()

    def _reset(self) -> None:
        """Per-process state (a forked worker starts with its own threads, counters and files)."""
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._entries: dict[tuple[int, str], _Entry] = {}
        self._queued: dict[int, tuple[Any, list[tuple[str, Future]]]] = {}  # id(store) -> names waiting
        self._bytes = self._count = 0
        self._names = itertools.count()

    def _check_process(self) -> None:
        if self._pid != os.getpid():
            self._reset()

    def _pool(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.num_workers, thread_name_prefix="energon-arrow-cache")
        return self._executor

    # ---- storing -----------------------------------------------------------------------------------------
    @property
    def _stores_pickled(self) -> bool:
        """Entries read from stores are kept pickled (method "pickle"), else as their raw bytes."""
        return self.method == "pickle"

    def _encode(self, data: Any, name: str, pickled: bool) -> bytes:
        if pickled:
            return pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL)
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise LoaderError(
                f"FileStoreCachePool(method='raw'): {name!r} is a {type(data).__name__}, not bytes (use "
                "method='pickle')"
            )
        return bytes(data)

    def _spill(self, data: Any, name: str, source: Any, pickled: bool) -> tuple[Path | None, Any, Any]:
        """(path of the cached copy, None, source), or (None, data, source) when the cache is full."""
        blob = self._encode(data, name, pickled)
        with self._lock:
            if self._bytes + len(blob) > self.max_bytes or self._count + 1 > self.max_count:
                return None, data, source
            self._bytes += len(blob)
            self._count += 1
            path = self.cache_dir / f"{os.getpid()}-{next(self._names)}"
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(blob)
        os.replace(tmp, path)
        return path, None, source

    def _fetch(self, ds: Any, fname: str) -> tuple[Path | None, Any, Any]:
        data, source = ds[fname]
        return self._spill(data, fname, source, self._stores_pickled)

    def _drain(self, ds_id: int) -> None:
        """Fetch every name queued for one store with one `get_many` (names queue up while the threads are busy,
        so a backlog becomes one coalesced read); a failing batch is retried name by name, so each Lazy gets
        its own result or error."""
        with self._lock:
            ds, items = self._queued.pop(ds_id, (None, []))
        if not items:
            return
        try:
            got = ds.get_many([name for name, _ in items]) if len(items) > 1 else None
        except Exception:  # noqa: BLE001 - resolved per name below
            got = None
        for i, (name, future) in enumerate(items):
            try:
                if got is None:
                    future.set_result(self._fetch(ds, name))
                else:
                    data, source = got[i]
                    future.set_result(self._spill(data, name, source, self._stores_pickled))
            except BaseException as exc:  # noqa: BLE001 - handed to the Lazy that reads it
                future.set_exception(exc)

    def _read(self, path: Path, pickled: bool) -> Any:
        blob = path.read_bytes()
        return pickle.loads(blob) if pickled else blob

    def _release(self, entry: _Entry) -> None:
        """A Lazy was dropped: delete the cached copy when it was the last one referring to it."""
        if self._pid != os.getpid():
            return
        with self._lock:
            entry.refs -= 1
            if entry.refs > 0:
                return
            for key, e in list(self._entries.items()):
                if e is entry:
                    del self._entries[key]
        if entry.future.done() and entry.future.exception() is None:
            path = entry.future.result()[0]
            if path is not None and path.exists():
                size = path.stat().st_size
                path.unlink()
                with self._lock:
                    self._bytes -= size
                    self._count -= 1

    # ---- the CachePool interface -------------------------------------------------------------------------
    def get(self, ds: Any, fname: str, sample: Any = None) -> Any:
        return self.get_lazy(ds, fname).get(sample)

    def get_lazy(self, ds: Any, fname: str) -> FileCacheLazy:
        self._check_process()
        store, name, decoders = raw_store(ds, fname)
        key = (id(store), name, tuple(map(id, decoders)))
        with self._lock:
            entry = self._entries.get(key)
            if entry is None and callable(getattr(store, "get_many", None)):
                entry = self._entries[key] = _Entry(Future(), name, tuple(decoders), self._stores_pickled)
                self._queued.setdefault(id(store), (store, []))[1].append((name, entry.future))
                self._pool().submit(self._drain, id(store))
            elif entry is None:
                fetch = self._pool().submit(self._fetch, store, name)
                entry = _Entry(fetch, name, tuple(decoders), self._stores_pickled)
                self._entries[key] = entry
        return FileCacheLazy(ds, fname, self, entry)

    def to_cache(self, data: Any, name: str) -> FileCacheLazy:
        """`data` (anything picklable, whatever the pool's method, as energon's) kept in the cache until read."""
        self._check_process()
        done: Future = Future()
        done.set_result(self._spill(data, name, None, True))
        entry = _Entry(done)
        with self._lock:
            self._entries[(id(entry), name)] = entry
        return FileCacheLazy(None, name, self, entry)

    def close(self) -> None:
        if self._executor is not None and self._pid == os.getpid():
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        if os.getpid() == self._owner:
            self._finalizer()

    def __getstate__(self):
        raise TypeError("a FileStoreCachePool is shared with the loader's workers by fork, not pickled")

    def __str__(self) -> str:
        return f"FileStoreCachePool({self.cache_dir}, method={self.method!r})"
