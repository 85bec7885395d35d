"""Property-based fuzzing of every input format the project parses (run by test_fuzz.py in a subprocess, so that a
crash in a C extension fails the test instead of killing pytest).

`python -m tests.reliability.fuzz_targets TARGET EXAMPLES` runs hypothesis over TARGET with a fixed seed
(`derandomize=True`) and prints `{"target": ..., "cases": N, "rejected": R}` (R: cases that raised one of the
project's errors). A parse may raise only an error class defined in energon_arrow (bad input is reported, never a
bare KeyError/TypeError/...); each parse runs under a watchdog (`faulthandler.dump_traceback_later`) that aborts the
process with a traceback if one call takes longer than PARSE_TIMEOUT seconds, C code included.
Targets: tar, tar_idx, idx_bin, index_sqlite, metadataset, page_writer, kernels.
"""

from __future__ import annotations

import contextlib
import faulthandler
import io
import json
import os
import shutil
import sqlite3
import sys
import tarfile
import tempfile

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from energon_arrow.adapters import open_storage

PARSE_TIMEOUT = 20.0
STATS = {"cases": 0, "rejected": 0}


def project_error(exc: BaseException) -> bool:
    return any(t.__module__.startswith("energon_arrow.") for t in type(exc).__mro__)


@contextlib.contextmanager
def parse():
    """One parse: counted, under the watchdog, and only the project's errors are allowed out."""
    STATS["cases"] += 1
    faulthandler.dump_traceback_later(PARSE_TIMEOUT, exit=True)
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - classified below
        if not project_error(exc):
            name = f"{type(exc).__module__}.{type(exc).__name__}"
            raise AssertionError(f"not a project error: {name}: {exc}") from exc
        STATS["rejected"] += 1
    finally:
        faulthandler.cancel_dump_traceback_later()


# ---- mutations of valid files ------------------------------------------------------------------------------
INTERESTING = [0, 1, 2, 7, 255, 256, 511, 512, 2**31 - 1, 2**31, 2**32 - 1, 2**63 - 1, 2**64 - 1]


@st.composite
def mutated(draw, base: bytes):
    """`base` with a few edits: byte overwrites, interesting 4/8-byte integers, truncation, insertion, zeroing."""
    data = bytearray(base)
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["byte", "int", "truncate", "insert", "zero", "octal"]))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if kind == "byte" and data:
            data[at] = draw(st.integers(0, 255))
        elif kind == "int" and data:
            width = draw(st.sampled_from([4, 8]))
            value = draw(st.sampled_from(INTERESTING)) % (1 << (8 * width))
            data[at : at + width] = value.to_bytes(width, "little")
        elif kind == "truncate":
            del data[at:]
        elif kind == "insert":
            data[at:at] = draw(st.binary(max_size=600))
        elif kind == "zero":
            data[at : at + draw(st.integers(1, 1024))] = bytes(min(len(data) - at, 1024))
        elif kind == "octal" and data:  # tar header numbers are octal text
            data[at : at + 12] = draw(st.from_regex(rb"\A[0-7 \x00x]{1,12}\Z", fullmatch=True))
    return bytes(data)


def _tar(members: list[tuple[str, bytes]], fmt: int) -> bytes:
    buf = io.BytesIO()
    try:
        with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
            for name, payload in members:
                info = tarfile.TarInfo(name)
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    except ValueError:  # a name too long for ustar
        return _tar(members, tarfile.PAX_FORMAT)
    return buf.getvalue()


names = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=120)
members = st.lists(st.tuples(names, st.binary(max_size=700)), max_size=6)
formats = st.sampled_from([tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])


# ---- targets ---------------------------------------------------------------------------------------------
def target_tar(tmp: str, examples: int):
    from energon_arrow.tar import index_bytes, index_shard
    from energon_arrow.testing.synthetic import shard_bytes

    valid = shard_bytes(0, 4, image_bytes=300)
    storage = open_storage(tmp)

    def check(data: bytes):
        with parse():
            index = index_bytes(data, "fuzz.tar")
            assert int(np.max(index.part_offsets + index.part_sizes, initial=0)) <= len(data)
        with open(os.path.join(tmp, "f.tar"), "wb") as f:
            f.write(data)
        with parse():
            index_shard(storage, "f.tar")  # the memory-mapped local path

    @given(st.one_of(mutated(valid), st.builds(_tar, members, formats).flatmap(mutated)))
    def case(data):
        check(data)

    return case


def target_tar_idx(tmp: str, examples: int):
    from energon_arrow.meta.tar_index import read_tar_index

    storage = open_storage(tmp)
    valid = np.arange(0, 4096, 512, dtype=np.uint64).tobytes()

    @given(st.one_of(mutated(valid), st.binary(max_size=100)))
    def case(data):
        storage.write_atomic("s.tar.idx", data)
        with parse():
            offsets = read_tar_index(storage, "s.tar")
            assert offsets.dtype == np.int64 and offsets.size * 8 == len(data)

    return case


def target_idx_bin(tmp: str, examples: int):
    from energon_arrow.tokens.gpt_index import build_gpt_indices
    from energon_arrow.tokens.gpt_samples import gather_rows_native
    from energon_arrow.tokens.indexed import IndexedTokens
    from tests.tokens.test_reader import raw_pair

    docs = [[[1, 2, 3, 4]], [[5, 6], [7, 8, 9]], [[10] * 9], [[11, 12]]]
    data, idx = raw_pair(docs)
    prefix = os.path.join(tmp, "t")

    @given(mutated(idx), st.one_of(st.just(data), mutated(data)), st.sampled_from([None, True, False]))
    def case(idx_bytes, bin_bytes, multimodal):
        for suffix, content in ((".idx", idx_bytes), (".bin", bin_bytes)):
            with open(prefix + suffix, "wb") as f:
                f.write(content)
        with parse():
            tokens = IndexedTokens(prefix, multimodal=multimodal)
            for i in range(len(tokens)):
                tokens[i]
            n = len(tokens)
            if n and int(tokens.sequence_lengths.sum()) > 4:
                gpt = build_gpt_indices(tokens.sequence_lengths, range(n), None, 3, seed=1)
                ids = np.arange(len(gpt), dtype=np.int64)
                args = (tokens.sequence_pointers, tokens.sequence_lengths, gpt.document_index)
                gather_rows_native(tokens._tokens, *args, gpt.sample_index, ids, 1, 4)

    return case


def _prepared(tmp: str) -> str:
    from energon_arrow.index.prepare import PrepareOptions, prepare_dataset
    from energon_arrow.meta import field_map_dataset, parse_split_ratio
    from energon_arrow.testing.synthetic import write_webdataset

    root = os.path.join(tmp, "ds")
    write_webdataset(root, shards=2, samples_per_shard=6, image_bytes=50)
    options = PrepareOptions(
        split_ratio=parse_split_ratio("1,0,0"),
        dataset_yaml=field_map_dataset("TextSample", {"text": "txt"}),
        num_workers=1,
    )
    prepare_dataset(root, options)
    shutil.rmtree(os.path.join(root, ".nv-meta", "arrow"), ignore_errors=True)
    return root


def target_index_sqlite(tmp: str, examples: int):
    from energon_arrow.index.from_sqlite import side_index_from_sqlite

    root = _prepared(tmp)
    path = os.path.join(root, ".nv-meta", "index.sqlite")
    with open(path, "rb") as f:
        valid = f.read()
    storage = open_storage(root)

    @given(st.one_of(mutated(valid), st.binary(max_size=300)))
    def case(data):
        with open(path, "wb") as f:
            f.write(data)
        with parse():
            tables = side_index_from_sqlite(storage)
            assert set(tables) == {"shards", "samples", "parts"}

    return case


yaml_keys = st.sampled_from(
    [
        "__class__",
        "splits",
        "train",
        "val",
        "blend",
        "blend_epochized",
        "join",
        "path",
        "weight",
        "subset",
        "range",
        "aux",
        "subflavors",
        "split_part",
        "repetitions",
        "MetadatasetV2",
        "x",
    ]  # fmt: skip
)
yaml_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 200), st.floats(allow_nan=True), st.text(max_size=12),
    st.sampled_from(["MetadatasetV2", "ds", "../ds", "s3://b/ds", "x.yaml", "end", "50%", "-3%", "filesystem://a"]),
)  # fmt: skip
yaml_docs = st.recursive(
    yaml_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(yaml_keys, inner, max_size=5)),
    max_leaves=25,
)


@st.composite
def metadataset_text(draw) -> bytes:
    import yaml

    doc = draw(yaml_docs)
    shape = draw(st.sampled_from(["raw", "split", "entry", "blend"]))
    if shape != "raw":  # a plausible MetadatasetV2 skeleton around the drawn values
        entry = draw(st.dictionaries(yaml_keys, yaml_docs, max_size=4))
        entry["path"] = draw(st.sampled_from(["ds", "../ds", "s3://b/ds", "x.yaml"]))
        split = {"split": doc, "entry": entry, "blend": {"blend": [entry, doc]}}[shape]
        doc = {"__class__": "MetadatasetV2", "splits": {"train": split}}
    text = yaml.safe_dump(doc).encode()
    return draw(st.one_of(st.just(text), mutated(text)))


def _read_metadataset(path: str) -> None:
    """Resolve the train split and the absolute rows of each leaf's subset (as if each had 100 samples)."""
    from energon_arrow.metadataset.tree import resolve_split

    for leaf in resolve_split(path, "train").leaves:
        if leaf.subset is not None:
            leaf.subset.bounds(100, path)


def target_metadataset(tmp: str, examples: int):
    read = _read_metadataset
    path = os.path.join(tmp, "meta.yaml")

    @given(metadataset_text())
    def case(text):
        with open(path, "wb") as f:
            f.write(text)
        with parse():
            read(path)

    return case


@st.composite
def shard_indexes(draw):
    from energon_arrow.tar.samples import ShardIndex

    keys = draw(st.lists(names, max_size=12, unique=True))
    parts = [draw(st.lists(st.text(max_size=8), min_size=0, max_size=3)) for _ in keys]
    big = st.integers(0, 2**62)
    sizes = np.array([draw(big) for _ in keys], np.int64)
    counts = [len(p) for p in parts]
    m = sum(counts)
    return ShardIndex(
        sample_keys=pa.array(keys, pa.string()),
        sample_offsets=np.array([draw(big) for _ in keys], np.int64),
        sample_sizes=sizes,
        part_sample_index=np.repeat(np.arange(len(keys), dtype=np.int64), counts),
        part_names=pa.array([n for p in parts for n in p], pa.string()),
        part_offsets=np.sort(np.array([draw(big) for _ in range(m)], np.int64)),
        part_sizes=np.array([draw(big) for _ in range(m)], np.int64),
        data_end=0,
    )


def target_page_writer(tmp: str, examples: int):
    """The compiled index.sqlite page writer on arbitrary keys, part names and 62-bit offsets: the file it writes
    passes quick_check (in finish) and holds exactly the rows SQLite's own inserts would."""
    from energon_arrow.index.sqlite_pages import IndexSqliteWriter
    from energon_arrow.index.sqlite_writer import IndexSqliteBuilder

    query = "SELECT rowid, * FROM {} ORDER BY rowid"

    @given(st.lists(shard_indexes(), min_size=1, max_size=4), st.sampled_from([512, 1024, 4096]))
    def case(shards, page_size):
        paths = [os.path.join(tmp, n) for n in ("pages.sqlite", "inserts.sqlite")]
        for p in paths:
            with contextlib.suppress(FileNotFoundError):
                os.remove(p)
        writers = [IndexSqliteWriter(paths[0], page_size), IndexSqliteBuilder(paths[1])]
        outcomes = []
        for writer in writers:
            with parse():
                try:
                    for i, index in enumerate(shards):
                        writer.add_shard(i, f"s{i}.tar", index)
                    writer.finish()
                    outcomes.append("ok")
                except Exception:
                    writer.abort()
                    outcomes.append("error")
                    raise
        assert outcomes[0] == outcomes[1], outcomes
        if outcomes[0] == "ok":
            rows = []
            for p in paths:
                with contextlib.closing(sqlite3.connect(p)) as db:
                    rows.append([db.execute(query.format(t)).fetchall() for t in ("samples", "sample_parts")])
            assert rows[0] == rows[1]

    return case


def target_kernels(tmp: str, examples: int):
    """The compiled token kernels called directly with arbitrary (corrupt) index arrays: they may raise any Python
    error (their wrappers check inputs) but must never read or write outside their buffers."""
    try:
        from energon_arrow.tokens import _kernels as k
    except ImportError:
        return None
    ints = st.integers(-(2**40), 2**40)

    @given(
        st.lists(st.integers(-5, 40), min_size=1, max_size=20),
        st.lists(st.tuples(ints, ints), min_size=1, max_size=8),
        st.lists(st.integers(-3, 25), min_size=1, max_size=25),
        st.lists(st.integers(-3, 10), min_size=1, max_size=8),
        st.integers(1, 9),
        st.integers(-2, 2),
        st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=4),
    )
    def case(lengths, boundaries, doc_index, ids, width, extra, weights):
        lengths32 = np.array(lengths, np.int32)
        tokens = np.arange(int(np.clip(lengths32, 0, None).sum()) + 3, dtype=np.uint16)
        pointers = np.concatenate([[0], np.cumsum(np.clip(lengths32, 0, None))[:-1] * 2]).astype(np.int64)
        for sample_index in (np.array(boundaries, np.int64), np.array(boundaries, np.int64).astype(np.int32)):
            out = np.empty((len(ids), width), np.uint16)
            with parse(), contextlib.suppress(Exception):
                k.gather_samples(
                    tokens, pointers, lengths32, np.array(doc_index, np.int32), sample_index,
                    np.array(ids, np.int64), extra, out,
                )  # fmt: skip
        for dtype in (np.int32, np.int64):
            out = np.empty((width + 1, 2), dtype)
            with parse(), contextlib.suppress(Exception):
                k.sample_boundaries(lengths32[::-1], width, extra, out)
        with parse(), contextlib.suppress(Exception):
            k.blending_indices(np.array(weights), np.empty(width, np.int16), np.empty(width, np.int64))
        with parse(), contextlib.suppress(Exception):
            key = np.arange(624, dtype=np.uint32)
            k.legacy_shuffle(np.array(lengths, np.int64), key, extra % 625)

    return case


TARGETS = {
    "tar": target_tar,
    "tar_idx": target_tar_idx,
    "idx_bin": target_idx_bin,
    "index_sqlite": target_index_sqlite,
    "metadataset": target_metadataset,
    "page_writer": target_page_writer,
    "kernels": target_kernels,
}


def run(target: str, examples: int) -> dict:
    tmp = tempfile.mkdtemp(prefix=f"ea-fuzz-{target}-")
    try:
        case = TARGETS[target](tmp, examples)
        if case is not None:
            settings(
                max_examples=examples,
                derandomize=True,
                database=None,
                deadline=None,
                suppress_health_check=list(HealthCheck),
            )(case)()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"target": target, **STATS}


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], int(sys.argv[2]))))
