"""`.nv-meta/arrow/manifest.json`: the size and SHA-256 of every file `energon-arrow prepare` publishes, written
after all of them (locally in the same atomic `.nv-meta` swap; on object stores one PUT after the `index.uuid`
marker). Readers check what they read against it; datasets without one (energon-prepared, earlier versions) are
read exactly as before.

Digest: SHA-256 (`hashlib`): no new dependency, about 1.8 GB/s per core with the SHA extensions of current x86 and
ARM CPUs (measured: 1.84 GB/s; BLAKE2b 1.21, MD5 0.76), the GIL released while it hashes, and collision-resistant,
so the digests also key the node-local caches derived from these files (a CRC-32 could not). Prepare hashes each
file's bytes as it publishes them: small files and `.tar.idx` from the bytes in memory, the Parquet files and
`index.sqlite` from the local build file before it is moved in or uploaded (from the page cache, on the thread that
finishes index.sqlite); nothing is read back from the store.

What is verified (`read_verified`, `check_bytes`): prepare's own files - `.info.json`, `index.uuid`,
`arrow/shards.parquet` and `arrow/summary.parquet` (read whole), every `<shard>.tar.idx` (where read: lint), and
the whole of `samples.parquet`/`parts.parquet` where they are read whole (the loader's row index); where they are
scanned in place (DuckDB queries) their size (`check_size`) and, on object stores, every range read against the
CRC32C of each 1 MiB recorded with them (`RangeCrcs`, meta.verified_ranges). `index.sqlite` is verified where
energon-arrow downloads it from an object store (`download_verified`: the media metadata lookups); a local one is
opened in place by SQLite, which reads its pages at random, and is not hashed. User-editable files - `split.yaml`,
the dataset yaml, `sample_loader.py` - are recorded as of prepare (`"editable"`) and never an error: a read that
differs from the record is a user edit when its MD5 is the object's ETag (on object stores whose ETags are MD5s,
told by the manifest's own ETag), elsewhere when a second read returns the same bytes; reads go on until one of
these holds. A mismatch of a verified file is read again (the storage's retry budget, `Storage.retry`; locally once
more), then `IntegrityError` names the file URL, the expected and actual size and digest, and
"re-run `energon-arrow prepare URL`". The manifest is read once per `Storage` object (`manifest_of`) and carries
a digest of its own content.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
from dataclasses import dataclass, field

import numpy as np

from energon_arrow.adapters import NotFound, StorageError
from energon_arrow.adapters.retry import reread_attempts
from energon_arrow.meta.constants import META_DIR

log = logging.getLogger(__name__)

MANIFEST_NAME = "arrow/manifest.json"  # in META_DIR
MANIFEST_REL = f"{META_DIR}/{MANIFEST_NAME}"
FORMAT = 1
_MEMO = "_ea_manifest"  # attribute of a Storage object: its manifest, read once
_CHUNK = 8 << 20
# the CRC32C chunk of files read in place by ranges (DuckDB scans): meta.verified_ranges
RANGE_CHUNK = 1 << 20


class IntegrityError(StorageError):
    """A file read from a dataset differs from what prepare recorded in its manifest (after reading it again)."""


@dataclass(frozen=True)
class RangeCrcs:
    """The CRC32C of every `chunk`-byte piece of a file (the last one shorter): what range reads check."""

    chunk: int
    crcs: np.ndarray  # uint32, one per chunk

    def to_json(self) -> dict:
        return {"bytes": self.chunk, "crc32c": base64.b64encode(self.crcs.astype("<u4").tobytes()).decode()}

    @classmethod
    def from_json(cls, raw: dict) -> RangeCrcs:
        crcs = np.frombuffer(base64.b64decode(raw["crc32c"], validate=True), "<u4").astype(np.uint32)
        chunk = int(raw["bytes"])
        if chunk <= 0:
            raise ValueError("chunk bytes must be positive")
        return cls(chunk, crcs)


@dataclass(frozen=True)
class FileDigest:
    size: int
    sha256: str
    chunks: RangeCrcs | None = field(default=None, compare=False)  # for files read in place by ranges

    def to_json(self) -> dict:
        out = {"size": self.size, "sha256": self.sha256}
        if self.chunks is not None:
            out["chunks"] = self.chunks.to_json()
        return out

    @classmethod
    def from_json(cls, raw: dict) -> FileDigest:
        chunks = RangeCrcs.from_json(raw["chunks"]) if "chunks" in raw else None
        digest = cls(int(raw["size"]), str(raw["sha256"]), chunks)
        if chunks is not None and len(chunks.crcs) != -(-digest.size // chunks.chunk):
            raise ValueError("chunk CRCs do not cover the file")
        return digest


def digest_of_bytes(data) -> FileDigest:
    return FileDigest(len(data), hashlib.sha256(data).hexdigest())


def digest_of_file(path: str, chunk_crcs: bool = False) -> FileDigest:
    """The digest of a local file (read in 8 MiB pieces); `chunk_crcs`: with the CRC32C of every RANGE_CHUNK
    bytes (for files readers scan in place by ranges: meta.verified_ranges), computed in the same pass."""
    from energon_arrow.tar.crc import ChunkCrcs

    h, size, crcs = hashlib.sha256(), 0, []
    chunks = ChunkCrcs(crcs, RANGE_CHUNK) if chunk_crcs else None
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(_CHUNK)
        view = memoryview(buf)
        while n := f.readinto(buf):
            h.update(view[:n])
            size += n
            if chunks is not None:
                chunks.update(view[:n])
    if chunks is None:
        return FileDigest(size, h.hexdigest())
    chunks.finish()
    return FileDigest(
        size, h.hexdigest(), RangeCrcs(RANGE_CHUNK, np.concatenate(crcs or [np.zeros(0, np.uint32)]))
    )


def _body_digest(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def manifest_bytes(files: dict[str, FileDigest], editable: set[str] | frozenset = frozenset()) -> bytes:
    """The manifest of `files` (paths relative to the dataset root -> digest); `editable`: those of them a user
    may edit (recorded, never an error)."""
    body = {
        "format": FORMAT,
        "algorithm": "sha256",
        "files": {rel: files[rel].to_json() for rel in sorted(files)},
        "editable": sorted(set(editable) & set(files)),
    }
    return json.dumps({**body, "self_sha256": _body_digest(body)}, indent=1).encode()


@dataclass
class Manifest:
    files: dict[str, FileDigest]
    editable: frozenset[str]
    # MD5 of the manifest's own bytes as read (whether the store's ETags are MD5s: etag_judge)
    md5: str | None = None

    def entry(self, rel: str) -> FileDigest | None:
        return self.files.get(rel)

    def digest(self, rel: str) -> str | None:
        entry = self.files.get(rel)
        return None if entry is None else entry.sha256


def parse_manifest(data: bytes) -> Manifest | None:
    """The manifest in `data`, None when it is not one whole (its own digest checks)."""
    try:
        raw = json.loads(data)
        body = {k: v for k, v in raw.items() if k != "self_sha256"}
        if raw.get("self_sha256") != _body_digest(body) or raw.get("format") != FORMAT:
            return None
        files = {rel: FileDigest.from_json(e) for rel, e in raw["files"].items()}
        return Manifest(files, frozenset(raw.get("editable", ())))
    except (ValueError, TypeError, KeyError, AttributeError, base64.binascii.Error):
        return None


def manifest_of(storage) -> Manifest | None:
    """The dataset's manifest, read once per Storage object; None when there is none (prepared by energon or an
    earlier version). One that does not check (a damaged response) is read again; one that never does is an
    IntegrityError."""
    memo = storage.__dict__.get(_MEMO, False)
    if memo is not False:
        return memo
    try:
        data = storage.read_bytes(MANIFEST_REL)
    except NotFound:
        storage.__dict__[_MEMO] = None
        return None
    manifest = parse_manifest(data)
    reads = 1
    if manifest is None:
        for _ in reread_attempts(storage):
            reads += 1
            data = storage.read_bytes(MANIFEST_REL)
            manifest = parse_manifest(data)
            if manifest is not None:
                break
    if manifest is None:
        raise IntegrityError(
            storage.url_of(MANIFEST_REL),
            f"not a valid manifest (its own SHA-256 does not match, {reads} reads); re-run "
            f"`energon-arrow prepare {storage.url}`",
        )
    manifest.md5 = hashlib.md5(data, usedforsecurity=False).hexdigest()
    storage.__dict__[_MEMO] = manifest
    return manifest


def _recorded(storage, rel: str) -> tuple[FileDigest | None, bool]:
    """(what the manifest records for `rel` or None, whether `rel` is user-editable)."""
    manifest = manifest_of(storage)
    if manifest is None:
        return None, False
    return manifest.entry(rel), rel in manifest.editable


def forget_manifest(storage) -> None:
    """Drop the manifest remembered for `storage` (after a prepare replaced it)."""
    storage.__dict__.pop(_MEMO, None)


def _mismatch(storage, rel: str, expected: FileDigest, got: FileDigest, reads: int) -> IntegrityError:
    return IntegrityError(
        storage.url_of(rel),
        f"differs from what prepare recorded in {MANIFEST_REL} (expected {expected.size} bytes, sha256 "
        f"{expected.sha256}; read {got.size} bytes, sha256 {got.sha256}; {reads} reads): the file was damaged or "
        f"changed after prepare; re-run `energon-arrow prepare {storage.url}`",
    )


def _fresh_etag(storage, rel: str) -> str | None:
    storage.fs.invalidate_cache(storage.path_of(rel))  # s3fs may answer from a listing made before an edit
    return storage.stat(rel).etag


def etag_judge(storage):
    """For a dataset on an object store whose ETags are the MD5 of the content (a single PUT, no SSE-KMS; told by
    the manifest's own ETag, whose bytes are known right): a function `(rel, data) -> bool`, whether `data` is the
    object's content now (its MD5 equals a fresh ETag). None elsewhere (local files, multipart or encrypted
    objects, no manifest)."""
    manifest = manifest_of(storage)
    if storage.is_local or manifest is None or manifest.md5 is None:
        return None
    if _fresh_etag(storage, MANIFEST_REL) != manifest.md5:
        return None
    return lambda rel, data: hashlib.md5(data, usedforsecurity=False).hexdigest() == _fresh_etag(storage, rel)


def read_verified(storage, rel: str, read=None):
    """The bytes of `rel` (`read()`: how to read them, default `storage.read_bytes(rel)`), checked against the
    manifest when it lists the file: read again on a mismatch, then an IntegrityError. A user-editable file that
    differs from the record is the user's edit when its MD5 is the object's ETag (object stores whose ETags are
    MD5s: `etag_judge`), elsewhere when a second read returns the same bytes (a damaged response rarely repeats)."""
    read = read or (lambda: storage.read_bytes(rel))
    data = read()
    expected, editable = _recorded(storage, rel)
    if expected is None:
        return data
    got = _quick(data, expected)
    if got is None:
        return data
    judge = etag_judge(storage) if editable else None
    if judge is not None and judge(rel, data):
        return _user_edit(storage, rel, data)
    reads = 1
    for _ in reread_attempts(storage):
        again = read()
        reads += 1
        got = _quick(again, expected)
        if got is None:
            return again
        if editable and (judge(rel, again) if judge is not None else again == data):
            return _user_edit(storage, rel, again)
        data = again
    if editable:
        why = "none matches the object's ETag (MD5)" if judge is not None else "they returned different bytes"
        raise IntegrityError(storage.url_of(rel), f"{reads} reads, {why} (a damaged connection or store?)")
    raise _mismatch(storage, rel, expected, got, reads)


def _user_edit(storage, rel: str, data):
    log.info("%s: changed since prepare (a user edit): used as it is", storage.url_of(rel))
    return data


def download_verified(storage, rel: str, path: str) -> None:
    """Stream `rel` into the local file `path` (never whole in memory), hashing it on the way; when the manifest
    lists it, a download that does not match is done again (the storage's retry budget), then an IntegrityError."""
    expected, editable = _recorded(storage, rel)
    reads, attempts = 0, reread_attempts(storage)
    while True:
        digest, size = hashlib.sha256(), 0
        with open(path, "wb") as f:
            for chunk in storage.iter_chunks(rel):
                digest.update(chunk)
                size += len(chunk)
                f.write(chunk)
        reads += 1
        got = FileDigest(size, digest.hexdigest())
        if expected is None or editable or got == expected:
            return
        if next(attempts, None) is None:
            raise _mismatch(storage, rel, expected, got, reads)


def _quick(data, expected: FileDigest) -> FileDigest | None:
    """None when `data` matches `expected`, else its digest (the size is compared first)."""
    if len(data) != expected.size:
        return FileDigest(len(data), hashlib.sha256(data).hexdigest())
    got = digest_of_bytes(data)
    return None if got == expected else got


def check_bytes(storage, rel: str, got: FileDigest, reads: int = 1) -> None:
    """Raise IntegrityError when the manifest lists `rel` with another digest than `got` (for callers that hash
    what they read themselves and retry on their own)."""
    expected, editable = _recorded(storage, rel)
    if expected is not None and got != expected and not editable:
        raise _mismatch(storage, rel, expected, got, reads)


def matches(storage, rel: str, got: FileDigest) -> bool:
    """Whether `got` is what the manifest records for `rel` (True when it records nothing)."""
    expected, _ = _recorded(storage, rel)
    return expected is None or got == expected


def check_size(storage, rel: str, size: int) -> None:
    """Raise IntegrityError when the manifest lists `rel` with another size (files read in place, in ranges)."""
    expected, editable = _recorded(storage, rel)
    if expected is not None and expected.size != size and not editable:
        raise IntegrityError(
            storage.url_of(rel),
            f"is {size} bytes, prepare recorded {expected.size} in {MANIFEST_REL}: the file was damaged or "
            f"changed after prepare; re-run `energon-arrow prepare {storage.url}`",
        )


def update_manifest(storage, changed: dict[str, FileDigest]) -> None:
    """Record new digests of files a later step replaced (prepare-media's index.sqlite), when the dataset has a
    manifest; published atomically."""
    manifest = manifest_of(storage)
    if manifest is None:
        return
    files = {**manifest.files, **changed}
    storage.write_atomic(MANIFEST_REL, manifest_bytes(files, manifest.editable))
    forget_manifest(storage)


def read_text_verified(storage, rel: str, encoding: str = "utf-8") -> str:
    """`read_verified` decoded (a StorageError naming the URL and offset when it is not valid `encoding`)."""
    data = read_verified(storage, rel)
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise StorageError(storage.url_of(rel), f"not valid {encoding} at byte offset {exc.start}") from None
