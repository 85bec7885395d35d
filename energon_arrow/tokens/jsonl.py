"""JSONL inputs for `preprocess`: expanding paths and globs (local or remote), splitting large local files
into line-aligned ranges for parallel work, and reading documents with file:line error reporting."""

from __future__ import annotations

import gzip
import io
import json
import os

try:  # a faster parser when installed (the `tokenizers` extra brings it); same errors and results
    from orjson import JSONDecodeError as _OrjsonError
    from orjson import loads as _loads
except ImportError:
    _loads, _OrjsonError = json.loads, json.JSONDecodeError
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from energon_arrow.adapters import Storage, open_storage

_GLOB = re.compile(r"[*?\[]")
GZIP_MAGIC = b"\x1f\x8b"


def is_glob(text: str) -> bool:
    return _GLOB.search(text) is not None


_COUNT_BLOCK = 16 * 1024 * 1024


class BadLineError(ValueError):
    """A JSONL line that is not a usable document; the message names the file and line number."""


@dataclass(frozen=True)
class InputFile:
    storage: Storage  # the file's folder
    rel: str  # file name relative to `storage`
    size: int

    @property
    def url(self) -> str:
        return self.storage.url_of(self.rel)


@dataclass(frozen=True)
class WorkUnit:
    """Bytes [start, end) of one input (end None: to the end), whose first line is line number `first_line`."""

    file: InputFile
    start: int = 0
    end: int | None = None
    first_line: int = 1


def expand_inputs(
    patterns: Sequence[str], storage_options: Mapping[str, Any] | None = None
) -> list[InputFile]:
    """Files named by paths or globs (`dir/*.jsonl`, `s3://b/data/**/*.jsonl.gz`), in argument order, each
    glob's matches sorted. A pattern that matches nothing is an error."""
    out: list[InputFile] = []
    for pattern in patterns:
        text = os.fspath(pattern)
        if not is_glob(text):
            head, _, name = text.rstrip("/").rpartition("/")
            storage = open_storage(head or ".", storage_options)
            out.append(InputFile(storage, name, storage.stat(name).size))
            continue
        parts = text.split("/")
        fixed = next(i for i, p in enumerate(parts) if _GLOB.search(p))
        base = "/".join(parts[:fixed]) or ("/" if text.startswith("/") else ".")
        storage = open_storage(base, storage_options)
        found = storage.scan("/".join(parts[fixed:]))
        if not found:
            raise FileNotFoundError(f"{text}: no input files match")
        out += [InputFile(storage, f.path, f.size) for f in found]
    if not out:
        raise ValueError("no input files given")
    return out


def is_gzip(f: InputFile) -> bool:
    if f.rel.endswith(".gz"):
        return True
    return f.size >= 2 and f.storage.read_range(f.rel, 0, 2) == GZIP_MAGIC


def plan_units(
    files: list[InputFile], workers: int, min_split_bytes: int = 64 * 1024 * 1024
) -> list[WorkUnit]:
    """One unit per file; when there are fewer files than workers, large local uncompressed files are split
    into line-aligned ranges (with the line number each range starts at) so every worker has work."""
    units: list[WorkUnit] = []
    total = sum(f.size for f in files)
    for f in files:
        pieces = 1
        if workers > len(files) and f.storage.is_local and f.size >= min_split_bytes and not is_gzip(f):
            pieces = max(1, min(workers * 2, round(workers * 2 * f.size / max(total, 1))))
        units += _split_file(f, pieces) if pieces > 1 else [WorkUnit(f)]
    return units


def _split_file(f: InputFile, pieces: int) -> list[WorkUnit]:
    path = f.storage.local_path(f.rel)
    cuts = [0]
    with open(path, "rb") as fh:
        for k in range(1, pieces):
            target = max(cuts[-1], f.size * k // pieces)
            fh.seek(target)
            if target:
                fh.readline()  # move to the start of the next line
            pos = fh.tell()
            if cuts[-1] < pos < f.size:
                cuts.append(pos)
        lines = [1]
        fh.seek(0)
        for a, b in zip(cuts, cuts[1:]):
            lines.append(lines[-1] + _count_newlines(fh, b - a))
    ends = cuts[1:] + [None]
    return [WorkUnit(f, a, b, ln) for a, b, ln in zip(cuts, ends, lines)]


def _count_newlines(fh, nbytes: int) -> int:
    count = 0
    while nbytes > 0:
        block = fh.read(min(_COUNT_BLOCK, nbytes))
        if not block:
            break
        count += block.count(b"\n")
        nbytes -= len(block)
    return count


def open_lines(unit: WorkUnit) -> Iterator[tuple[int, bytes]]:
    """(line number, raw line) for each line of the unit, gunzipping compressed inputs."""
    f = unit.file
    if f.storage.is_local:
        raw = open(f.storage.local_path(f.rel), "rb", buffering=1024 * 1024)  # noqa: SIM115
    else:
        raw = io.BufferedReader(f.storage.open_stream(f.rel), 1024 * 1024)
    with raw:
        number = unit.first_line - 1  # the last line read
        try:
            # the magic bytes from the stream already open (is_gzip would send a request of its own)
            compressed = f.rel.endswith(".gz") or raw.peek(2)[:2] == GZIP_MAGIC
            stream = gzip.GzipFile(fileobj=raw, mode="rb") if compressed else raw
            if unit.start:
                stream.seek(unit.start)
            pos, limit = unit.start, unit.end
            for number, line in enumerate(stream, unit.first_line):
                if limit is not None and pos >= limit:
                    break
                pos += len(line)
                yield number, line
        except (OSError, EOFError) as exc:
            raise BadLineError(f"{f.url}: cannot read input after line {number}: {exc}") from None


def parse_document(line: bytes, keys: Sequence[str], url: str, number: int) -> list[str] | None:
    """The text of each key for one line; None for a blank line; BadLineError naming file:line otherwise."""
    if not line.strip():
        return None
    try:
        obj = _loads(line)
    except (json.JSONDecodeError, _OrjsonError, UnicodeDecodeError) as exc:
        raise BadLineError(f"{url}:{number}: invalid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise BadLineError(f"{url}:{number}: expected a JSON object, got {type(obj).__name__}")
    texts = []
    for key in keys:
        if key not in obj:
            raise BadLineError(f"{url}:{number}: missing key {key!r}")
        value = obj[key]
        if not isinstance(value, str):
            raise BadLineError(f"{url}:{number}: key {key!r} is {type(value).__name__}, expected a string")
        texts.append(value)
    return texts
