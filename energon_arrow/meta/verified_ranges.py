"""Side-index files read in place by ranges (DuckDB scans, pyarrow datasets, Parquet footers of an object store),
checked against the CRC32C of every `RANGE_CHUNK` bytes that prepare recorded in the dataset's manifest
(meta.manifest `RangeCrcs`).

A file scanned in place is never read whole, so its SHA-256 cannot be checked; instead every read is widened to
whole chunks, fetched through the storage's retrying filesystem (transient faults are retried there), and each
chunk's CRC32C is compared before a byte is handed to the reader. A chunk that does not match is fetched again (the
storage's retry budget, `reread_attempts`), then an `IntegrityError` names the file URL, the byte range and the
number of reads. Chunks are 1 MiB: a Parquet column chunk of a large side index is megabytes, so widening costs
little there, and the manifest holds 4 bytes per MiB. Files the manifest lists without chunk CRCs (prepared by an
earlier version) or not at all are opened as before; their size is still checked against the manifest.

`verified_fs(storage)`: the filesystem to register with DuckDB or to wrap for pyarrow (its errors name the URL, the
operation and the attempts, and DuckDB's callers raise them in place of DuckDB's traceback text: `take_failure`),
`open_ranged(storage, rel)`: one file opened for ranged reads. Local files are read directly by their readers and
not wrapped (the chunk CRCs guard what crosses a network).
"""

from __future__ import annotations

import threading

from fsspec import AbstractFileSystem
from fsspec.spec import AbstractBufferedFile

from energon_arrow.adapters.backends import s3fs_attempts
from energon_arrow.adapters.errors import StorageError, TransientError, classify
from energon_arrow.adapters.retry import reread_attempts
from energon_arrow.meta.manifest import MANIFEST_REL, FileDigest, IntegrityError, check_size, manifest_of
from energon_arrow.tar.crc import first_bad_chunk


class VerifiedRangeFile(AbstractBufferedFile):
    """One side-index file read by verified whole chunks (read-only)."""

    def __init__(self, fs: VerifiedRangesFS, path: str, rel: str, digest: FileDigest):
        self.rel, self.digest = rel, digest
        chunk = digest.chunks.chunk
        super().__init__(fs, path, mode="rb", block_size=chunk, cache_type="readahead", size=digest.size)

    def _fetch_range(self, start: int, end: int) -> bytes:
        end = min(end, self.size)
        if start >= end:
            return b""
        chunk, storage = self.digest.chunks.chunk, self.fs.storage
        lo, hi = start // chunk * chunk, min(self.size, -(-end // chunk) * chunk)
        reads, attempts = 0, reread_attempts(storage)
        while True:
            data = self.fs.call("GET", self.path, self.fs.inner.cat_file, self.path, start=lo, end=hi)
            reads += 1
            short = len(data) != hi - lo
            bad = -1 if short else first_bad_chunk(data, lo, chunk, self.digest.chunks.crcs)
            if not short and bad < 0:
                return data[start - lo : end - lo]
            if next(attempts, None) is None:
                what = (
                    f"bytes [{lo}, {hi}) came back as {len(data)} bytes"
                    if short
                    else f"bytes [{bad * chunk}, {min(self.size, (bad + 1) * chunk)}) do not match their CRC32C"
                )
                raise self.fs.failed(
                    IntegrityError(
                        storage.url_of(self.rel),
                        f"{what} recorded in {MANIFEST_REL} ({reads} reads): damaged on the way or changed after "
                        f"prepare; re-run `energon-arrow prepare {storage.url}`",
                    )
                )


class VerifiedRangesFS(AbstractFileSystem):
    """`storage.retrying_fs` with the files its manifest lists with chunk CRCs opened as `VerifiedRangeFile`s; every
    other call goes to the inner filesystem. A call that fails raises a StorageError naming the URL, the operation
    and the attempts made, and is remembered (`take_failure`): DuckDB reports an error of a filesystem callback
    as a Python traceback in its own message, so its callers raise the remembered error instead."""

    cachable = False

    def __init__(self, storage, ranged: dict[str, tuple[str, FileDigest]]):
        super().__init__()
        self.storage, self.inner = storage, storage.retrying_fs
        self.protocol = self.inner.protocol  # DuckDB routes URLs of these schemes here
        self._ranged = ranged  # stripped path -> (rel, digest)
        self._lock = threading.Lock()
        self._failure: StorageError | None = None

    def failed(self, err: StorageError) -> StorageError:
        with self._lock:
            self._failure = self._failure or err
        return err

    def take_failure(self) -> StorageError | None:
        """The first error a call raised since the last take (None: none)."""
        with self._lock:
            err, self._failure = self._failure, None
        return err

    def call(self, op: str, path: str, fn, *args, **kwargs):
        """`fn(*args, **kwargs)` of the inner filesystem (which retried transient faults), its error classified."""
        try:
            return fn(*args, **kwargs)
        except StorageError as exc:
            raise self.failed(exc) from None
        except Exception as exc:  # noqa: BLE001 - every backend error is classified
            err = classify(exc, f"{self.storage.protocol}://{self._strip_protocol(path)}")
            if isinstance(err, TransientError):
                err = TransientError(
                    err.url, f"{op}: {err.reason}; gave up after {s3fs_attempts(self.storage.retry)} attempts"
                )
            else:
                err = type(err)(err.url, f"{op}: {err.reason}")
            raise self.failed(err) from exc

    def _strip_protocol(self, path):  # an instance's: the inner filesystem's scheme rules
        return self.inner._strip_protocol(path)

    def open(self, path, mode="rb", **kwargs):
        key = self.inner._strip_protocol(path)
        hit = self._ranged.get(key)
        if hit is None or mode != "rb":
            return self.call("OPEN", key, self.inner.open, path, mode, **kwargs)
        rel, digest = hit
        try:
            check_size(self.storage, rel, self.info(key)["size"])
        except IntegrityError as exc:
            raise self.failed(exc) from None
        return VerifiedRangeFile(self, key, rel, digest)

    def info(self, path, **kwargs):
        return self.call("HEAD", path, self.inner.info, path, **kwargs)

    def ls(self, path, detail=True, **kwargs):
        return self.call("LIST", path, self.inner.ls, path, detail=detail, **kwargs)

    def glob(self, path, **kwargs):
        return self.call("LIST", path, self.inner.glob, path, **kwargs)

    def find(self, path, **kwargs):
        return self.call("LIST", path, self.inner.find, path, **kwargs)

    def exists(self, path, **kwargs):
        return self.call("HEAD", path, self.inner.exists, path, **kwargs)

    def isdir(self, path):
        return self.call("HEAD", path, self.inner.isdir, path)

    def isfile(self, path):
        return self.call("HEAD", path, self.inner.isfile, path)

    def size(self, path):
        return self.call("HEAD", path, self.inner.size, path)

    def modified(self, path):
        return self.call("HEAD", path, self.inner.modified, path)


def verified_fs(storage) -> VerifiedRangesFS:
    """The filesystem readers of a remote `storage`'s side index go through: verified ranged reads of the files its
    manifest lists with chunk CRCs, errors that name the URL."""
    manifest = manifest_of(storage)
    ranged = {
        storage.path_of(rel): (rel, digest)
        for rel, digest in (manifest.files.items() if manifest is not None else ())
        if digest.chunks is not None
    }
    return VerifiedRangesFS(storage, ranged)


def open_ranged(storage, rel: str):
    """`rel` of a remote `storage` opened for ranged reads (verified where the manifest has its chunk CRCs)."""
    return verified_fs(storage).open(storage.path_of(rel), "rb")
