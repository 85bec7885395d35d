"""Media metadata in prepare, and `prepare-media`.

`MediaPass`: what `prepare_dataset` does for the media tables. With a filter (`--media-metadata-by-...`), the
candidate parts of every shard read this run go to a `MediaPool` as the shard is merged; shards reused unchanged
from the previous index keep their previous rows when that index was made with the same filter. Without a filter,
the previous index's media rows are kept for every entry that still exists (energon keeps the whole tables: it
rewrites index.sqlite in place), with a warning when some of them belong to re-indexed shards (their media may have
changed). The rows gather in a private SQLite file of the build folder and are added to the new index.sqlite
before it is published.

`prepare_media(storage, media_filter)`: energon's `prepare-media`. On a prepared WebDataset it re-reads the tar
headers of the shards in `.info.json` and adds (INSERT OR REPLACE) their media rows to index.sqlite; on a plain
folder it writes `.nv-meta/index.sqlite` with only the media tables (a filesystem dataset, read by
`SystemFileStore(base_dir)`). Existing rows and filters are kept, as energon does. The new file is built privately
and published atomically (rename / one PUT).
"""

from __future__ import annotations

import os
import shutil
import tempfile

from energon_arrow.index.media_extract import MediaFilterConfig
from energon_arrow.index.media_shards import (
    MediaPool,
    candidates,
    entry_keys,
    file_rows,
    indexed_shard_rows,
    shard_rows,
)
from energon_arrow.index.media_tables import MediaRows, read_filters
from energon_arrow.meta.constants import INDEX_SQLITE, META_DIR

SQLITE_REL = f"{META_DIR}/{INDEX_SQLITE}"
_CARRY_BATCH = 200_000  # entry keys of unchanged shards copied from the previous index per statement batch
_FILES_PER_TASK = 64  # folder files per pool task


class MediaPass:
    """The media tables of one prepare_dataset run (module docstring)."""

    def __init__(
        self, storage, build: str, media_filter: MediaFilterConfig | None, workers: int, previous: str | None
    ):
        self.storage = storage
        self.filter = media_filter
        self.previous = previous
        same = media_filter is None or (
            previous is not None
            and read_filters(previous) == {(media_filter.strategy.value, media_filter.stored_patterns)}
        )
        self.carry = previous is not None and same
        self.rows = MediaRows(os.path.join(build, "media.sqlite"))
        self.pool = MediaPool(storage, workers) if media_filter is not None else None
        self._keys: list[str] = []
        self.kept_reindexed = 0  # re-indexed shards whose previous rows were kept (no filter given)

    def add_shard(self, rel: str, index, unchanged: bool) -> None:
        if self.carry and (unchanged or self.filter is None):
            self.kept_reindexed += not unchanged
            self._keys.extend(entry_keys(index).to_pylist())
            if len(self._keys) >= _CARRY_BATCH:
                self.rows.carry_over(self.previous, self._keys)
                self._keys = []
            return
        names, offsets, sizes = candidates(index, self.filter)
        for rows in self.pool.submit(shard_rows, self.storage, rel, names, offsets, sizes, self.filter):
            self.rows.add(*rows)

    def finish_into(self, index_path: str, warnings: list[str]) -> int:
        """Add the media tables to the finished index.sqlite at `index_path`; returns the number of rows."""
        if self.pool is not None:
            for rows in self.pool.drain():
                self.rows.add(*rows)
            self.pool.close()
        if self.carry:
            self.rows.carry_over(self.previous, self._keys)
        if self.filter is not None:
            self.rows.add_filter(self.filter.strategy.value, self.filter.stored_patterns)
        if self.kept_reindexed:
            warnings.append(
                f"kept the previous media metadata of {self.kept_reindexed} re-indexed shards (as energon does); "
                "if their media changed, run prepare with --media-metadata-by-... to refresh it"
            )
        written = self.rows.written
        if self.filter is None and not written:  # no entry of the previous rows is left: no media tables
            self.rows.close()
            return 0
        self.rows.copy_into(index_path)
        return written

    def abort(self) -> None:
        if self.pool is not None:
            self.pool.close()
        self.rows.close()


def _publish(storage, local: str) -> None:
    """Replace the dataset's index.sqlite with the file `local` in one step (rename / one PUT), then its entry in
    the dataset's manifest (when prepare wrote one: meta.manifest)."""
    from energon_arrow.meta.manifest import digest_of_file, update_manifest

    digest = digest_of_file(local)
    if storage.is_local:
        final = storage.local_path(SQLITE_REL)
        if os.path.dirname(os.path.dirname(local)) != os.path.dirname(final):  # built elsewhere (--tmp-path)
            tmp = f"{final}.tmp-{os.getpid()}"
            shutil.copyfile(local, tmp)
            local = tmp
        os.replace(local, final)
    else:
        with open(local, "rb") as f:
            storage.write_atomic(SQLITE_REL, f.read())
    update_manifest(storage, {SQLITE_REL: digest})


def _tasks(storage, media_filter: MediaFilterConfig, new: str) -> list[tuple]:
    """The pool tasks of `prepare_media`; copies the existing index.sqlite to `new` first (its rows are kept)."""
    from energon_arrow.meta import MetaError, info_exists, read_info

    webdataset = info_exists(storage)
    if storage.exists(SQLITE_REL):
        if storage.is_local:
            shutil.copyfile(storage.local_path(SQLITE_REL), new)
        else:
            with open(new, "wb") as f:
                f.write(storage.read_bytes(SQLITE_REL))
    elif webdataset:
        raise MetaError(
            f"{storage.url_of(SQLITE_REL)} is missing (prepared with --no-energon-index?): media metadata is kept in "
            "index.sqlite; prepare the dataset with the energon index first"
        )
    if webdataset:
        return [
            (indexed_shard_rows, storage, rel, None, media_filter) for rel in read_info(storage).shard_counts
        ]
    accept = media_filter.name_filter()
    files = sorted(
        (f.path, f.size)
        for f in storage.scan("**/*")
        if f"/{META_DIR}/" not in f"/{f.path}" and accept(f.path.rsplit("/", 1)[-1])
    )
    if not files:
        raise MetaError(f"{storage.url}: No media files found to process")
    return [
        (file_rows, storage, files[i : i + _FILES_PER_TASK], media_filter)
        for i in range(0, len(files), _FILES_PER_TASK)
    ]


def prepare_media(
    storage, media_filter: MediaFilterConfig, workers: int, tmp_path: str | None = None, progress=None
) -> int:
    """energon's `prepare-media` (module docstring). `progress(done, total)` is called as tasks finish. Returns
    the number of media rows written this run."""
    made_meta = False
    if storage.is_local:
        meta = storage.local_path(META_DIR)
        made_meta = not os.path.isdir(meta)
        os.makedirs(meta, exist_ok=True)
    parent = tmp_path or (meta if storage.is_local else tempfile.gettempdir())
    os.makedirs(parent, exist_ok=True)
    build = tempfile.mkdtemp(prefix=".media-build-", dir=parent)
    pool = rows = None
    try:
        new = os.path.join(build, INDEX_SQLITE)
        tasks = _tasks(storage, media_filter, new)
        rows = MediaRows(new)
        pool = MediaPool(storage, workers)
        done = 0
        for task in tasks:
            for result in pool.submit(*task):
                rows.add(*result)
                done += 1
                if progress is not None:
                    progress(done, len(tasks))
        for result in pool.drain():
            rows.add(*result)
            done += 1
            if progress is not None:
                progress(done, len(tasks))
        rows.add_filter(media_filter.strategy.value, media_filter.stored_patterns)
        rows.close()
        _publish(storage, new)
        made_meta = False
        return rows.written
    finally:
        if pool is not None:
            pool.close()
        if rows is not None:
            rows.close()
        shutil.rmtree(build, ignore_errors=True)
        if made_meta:  # failed before anything was published: leave no empty .nv-meta behind
            shutil.rmtree(storage.local_path(META_DIR), ignore_errors=True)


def prepare_filesystem_dataset(
    root_path,
    media_filter: MediaFilterConfig,
    *,
    progress: bool,
    workers: int = 16,
    index_sqlite_tmp_path=None,
) -> int:
    """energon's `prepare_filesystem_dataset`: the media metadata of every media file below the folder `root_path`
    (an EPath, path or URL) into its `.nv-meta/index.sqlite`, for `SystemFileStore(root_path)` / a
    `filesystem://` aux source. `progress`: a progress bar on stderr. Returns the number of rows written."""
    from energon_arrow.epathlib import EPath
    from energon_arrow.meta import MetaError, info_exists

    path = root_path if isinstance(root_path, EPath) else EPath(root_path)
    storage = path._storage()
    if path.is_file():
        raise MetaError(f"{path}: expected the folder of a filesystem dataset, got a file")
    if info_exists(storage):
        raise MetaError(
            f"{path} is a prepared WebDataset, not a filesystem dataset: use prepare_media (energon-arrow "
            "prepare-media) or prepare with a media filter"
        )
    tmp = None if index_sqlite_tmp_path is None else str(index_sqlite_tmp_path)
    if not progress:
        return prepare_media(storage, media_filter, max(1, workers), tmp)
    import sys

    import click

    with click.progressbar(length=0, label="Processing media", show_pos=True, file=sys.stderr) as bar:

        def advance(done: int, total: int) -> None:
            bar.length = total
            bar.update(done - bar.pos)

        return prepare_media(storage, media_filter, max(1, workers), tmp, advance)
