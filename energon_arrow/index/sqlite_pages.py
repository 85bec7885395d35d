"""`index.sqlite` written page by page while the sample keys arrive in ascending order; SQLite inserts otherwise.

SQLite spends most of a prepare's index.sqlite time descending and balancing its b-trees row by row. Here every
b-tree's rows arrive in tree order (tar_file_id, then sample index and offset; the sample keys too, when each
shard's keys sort above those of the shards before it, as with zero-padded or shard-prefixed keys), so the
compiled writer `energon_arrow.index._sqlite_pages` lays the pages out bottom-up instead, in SQLite's file format:

1. SQLite itself creates energon's schema in the new file (`create_schema`): page 1 with sqlite_schema, and one
   empty root page per table and index;
2. each shard's rows are encoded as records and appended to the six b-trees (new pages go after the last one);
3. `finish` writes each tree's top page over its root page and sets the page count in the file header.

The file is a normal SQLite database at every `finish` (`PRAGMA integrity_check` passes; tests check it, and
`finish` itself runs the cheaper `PRAGMA quick_check` and raises `PageWriterError` if it fails).
`IndexSqliteWriter` is what prepare uses: page by page while it can, and at the first shard whose keys do not
sort above the keys before it, the file is finished and SQLite's inserts go on from there (`IndexSqliteBuilder`,
which also reports duplicate keys). Without the compiled module it uses SQLite inserts throughout.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from energon_arrow.index.sqlite_writer import IndexSqliteBuilder, create_schema
from energon_arrow.tar.arrow import from_numpy, ints_to_numpy

try:
    from energon_arrow.index import _sqlite_pages as _native
except ImportError:  # built without a C compiler
    _native = None

# energon's b-trees, in the order of the writer's trees: sqlite_schema name, table or index
_TREES = (
    ("samples", "t"),
    ("sqlite_autoindex_samples_1", "i"),
    ("sample_parts", "t"),
    ("idx_samples_by_tar_and_idx", "i"),
    ("idx_sample_parts_seq", "i"),
    ("idx_sample_parts_full", "i"),
)
_SAMPLES, _KEYS, _PARTS, _SAMPLES_BY_TAR, _PARTS_SEQ, _PARTS_FULL = range(len(_TREES))
_HEADER_PAGE_COUNT = 28  # offset of the database size (in pages) in the file header


def page_writer_available() -> bool:
    return _native is not None


def _text(values: pa.Array) -> tuple:
    """An Arrow string column for the writer: ('t', offsets, data), offsets sliced to the array."""
    values = values.cast(pa.string()) if values.type != pa.string() else values
    _, offsets, data = values.buffers()
    offs = np.frombuffer(offsets, dtype=np.int32)[values.offset : values.offset + len(values) + 1]
    return ("t", offs, data if data is not None else b"")


def _strictly_increasing(keys: pa.Array) -> bool:
    return len(keys) < 2 or pc.all(pc.less(keys[:-1], keys[1:])).as_py()


def _name_order(part_sample_index: np.ndarray, names: pa.Array, offsets: np.ndarray) -> np.ndarray:
    """The parts in idx_sample_parts_full's order: sample index, part name (bytewise), offset."""
    encoded = pc.dictionary_encode(names)
    by_name = ints_to_numpy(pc.sort_indices(encoded.dictionary)).astype(np.int64)
    rank = np.empty(len(by_name), dtype=np.int64)
    rank[by_name] = np.arange(len(by_name))
    codes = rank[ints_to_numpy(encoded.indices)]
    return np.lexsort((offsets, codes, part_sample_index)).astype(np.int64)


class IndexPagesWriter:
    """energon's index.sqlite at `path`, built page by page (`page_size`: SQLite's default when None).
    `try_add_shard` takes a shard only if its keys sort above every key added before (returns False otherwise,
    having written nothing); `finish` leaves a complete SQLite database."""

    def __init__(self, path: str, page_size: int | None = None):
        if _native is None:
            raise RuntimeError("energon_arrow.index._sqlite_pages is not built")
        db = sqlite3.connect(path, isolation_level=None)
        try:
            if page_size:
                db.execute(f"PRAGMA page_size = {int(page_size)}")
            for pragma in ("PRAGMA journal_mode = OFF", "PRAGMA synchronous = OFF"):  # a private new file
                db.execute(pragma)
            create_schema(db)
            roots = dict(db.execute("SELECT name, rootpage FROM sqlite_schema"))
            self.page_size = db.execute("PRAGMA page_size").fetchone()[0]
            pages = db.execute("PRAGMA page_count").fetchone()[0]
        finally:
            db.close()
        self._roots = tuple(int(roots[name]) for name, _ in _TREES)
        self.path = path
        self._fd = os.open(path, os.O_RDWR)
        self._writer = _native.open(
            self._fd, self.page_size, pages + 1, "".join(k for _, k in _TREES).encode()
        )
        self._samples = 0  # rows so far (rowids are 1-based and consecutive, as SQLite assigns them)
        self._parts = 0
        self._last_key: str | None = None
        self._last_tar = -1
        self.names: dict[int, str] = {}

    def try_add_shard(self, tar_file_id: int, shard: str, index) -> bool:
        keys = index.sample_keys
        n, m = index.sample_count, index.part_count
        ordered = _key_order(keys)
        if ordered is None or tar_file_id <= self._last_tar:
            return False
        order, first, last = ordered
        if n and self._last_key is not None and first <= self._last_key:
            return False
        tar = ("c", tar_file_id)
        key_col = _text(keys)
        sample_index = ("i", np.arange(n, dtype=np.int64))
        s0, p0 = self._samples + 1, self._parts + 1
        samples = (tar, key_col, sample_index, _ints(index.sample_offsets), _ints(index.sample_sizes))
        trees = [
            (_SAMPLES, samples, s0, None),
            (_KEYS, (key_col,), s0, order),
            (_SAMPLES_BY_TAR, (tar, sample_index), s0, None),
        ]
        if m:
            psi = np.ascontiguousarray(index.part_sample_index, dtype=np.int64)
            offsets = np.ascontiguousarray(index.part_offsets, dtype=np.int64)
            parts = (tar, ("i", psi), _text(index.part_names), ("i", offsets), _ints(index.part_sizes))
            trees += [
                (_PARTS, parts, p0, None),
                (_PARTS_SEQ, (tar, ("i", psi), ("i", offsets)), p0, None),
                (_PARTS_FULL, parts, p0, _name_order(psi, index.part_names, offsets)),
            ]
        with self._naming_errors():
            for tree, columns, rowid_base, tree_order in trees:
                _native.add(self._writer, tree, columns, rowid_base, tree_order)
        self._samples += n
        self._parts += m
        self._last_tar = tar_file_id
        if n:
            self._last_key = last
        self.names[tar_file_id] = shard
        return True

    def finish(self) -> None:
        """Complete the file, then check it with SQLite's `PRAGMA quick_check` (one pass over the pages)."""
        try:
            with self._naming_errors():
                pages = _native.finish(self._writer, self._roots)
                os.pwrite(self._fd, int(pages).to_bytes(4, "big"), _HEADER_PAGE_COUNT)
        finally:
            self.abort()
        quick_check(self.path)

    @contextlib.contextmanager
    def _naming_errors(self):
        """OSErrors of the writer (a full disk...) name the file."""
        try:
            yield
        except OSError as exc:
            if exc.filename is not None:
                raise
            raise OSError(exc.errno, exc.strerror, self.path) from None

    def abort(self) -> None:
        self._writer = None
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1


class PageWriterError(RuntimeError):
    """The index.sqlite written page by page is not a sound SQLite database (a bug of the page writer)."""


def quick_check(path: str) -> None:
    """Raise PageWriterError naming `path` and SQLite's findings unless `PRAGMA quick_check` reports ok."""
    try:
        db = sqlite3.connect(path)
        try:
            found = [row[0] for row in db.execute("PRAGMA quick_check")]
        finally:
            db.close()
    except sqlite3.DatabaseError as exc:
        found = [str(exc)]
    if found != ["ok"]:
        raise PageWriterError(
            f"{path}: the index.sqlite written page by page fails SQLite's PRAGMA quick_check: "
            + "; ".join(found[:5])
            + (f" (and {len(found) - 5} more)" if len(found) > 5 else "")
        )


def _ints(values: np.ndarray) -> tuple:
    return ("i", np.ascontiguousarray(values, dtype=np.int64))


def _key_order(keys: pa.Array) -> tuple[np.ndarray | None, str | None, str | None] | None:
    """(the order that sorts `keys`, None when they already ascend; smallest; largest), or None when a key
    repeats."""
    order = None
    if not _strictly_increasing(keys):
        order = ints_to_numpy(pc.sort_indices(keys)).astype(np.int64)
        keys = keys.take(from_numpy(order))
        if not _strictly_increasing(keys):
            return None
    if len(keys) == 0:
        return order, None, None
    return order, keys[0].as_py(), keys[-1].as_py()


class IndexSqliteWriter:
    """prepare's index.sqlite: page by page while the keys allow it, then (or without the compiled writer)
    SQLite inserts. Same interface as `IndexSqliteBuilder`."""

    def __init__(self, path: str, page_size: int | None = None):
        self.path = path
        self._pages = IndexPagesWriter(path, page_size) if _native is not None else None
        self._sqlite = None if self._pages is not None else IndexSqliteBuilder(path)

    @property
    def paged(self) -> bool:
        """Whether every shard so far went in page by page."""
        return self._sqlite is None

    def add_shard(self, tar_file_id: int, shard: str, index) -> None:
        if self._pages is not None:
            if self._pages.try_add_shard(tar_file_id, shard, index):
                return
            names = self._pages.names
            self._pages.finish()
            self._pages = None
            self._sqlite = IndexSqliteBuilder(self.path, names)
        self._sqlite.add_shard(tar_file_id, shard, index)

    def finish(self) -> None:
        if self._pages is not None:
            self._pages.finish()
        else:
            self._sqlite.finish()

    def abort(self) -> None:
        if self._pages is not None:
            self._pages.abort()
        if self._sqlite is not None:
            self._sqlite.abort()
