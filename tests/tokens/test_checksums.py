"""Token checksums (tokens/checksums.py): the side file PREFIX.crc written by every writer path, correct and
published last; `verify="crc"` detects a flipped byte locally; over S3 through the FaultProxy a damaged GET of the
.bin or .idx is read again, and damage on every read is a clear ChecksumError; datasets without a side file load
as before."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid

import numpy as np
import pytest
from crc32c import crc32c

from energon_arrow.adapters import open_storage
from energon_arrow.tar.crc import ChunkCrcs
from energon_arrow.testing.seaweedfs import ACCESS_KEY, SECRET_KEY
from energon_arrow.tokens.builder import TokenWriter, merge_datasets
from energon_arrow.tokens.checksums import CHUNK_BYTES, ChecksumError, parse_side_file
from energon_arrow.tokens.indexed import IndexedTokens


def make_docs(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 60000, int(rng.integers(1, 4000)), dtype=np.int32) for _ in range(n)]


def write(prefix, docs, options=None) -> None:
    with TokenWriter(prefix, np.int32, storage_options=options) as w:
        for d in docs:
            w.add_document(d)


def assert_side_file_matches(storage, stem: str) -> None:
    data, idx = storage.read_bytes(stem + ".bin"), storage.read_bytes(stem + ".idx")
    side = parse_side_file(storage.read_bytes(stem + ".crc"), stem + ".crc")
    assert (side.chunk, side.bin_size, side.idx_size) == (CHUNK_BYTES, len(data), len(idx))
    assert side.idx_crc == crc32c(idx)
    assert side.crcs.tolist() == [crc32c(data[a : a + CHUNK_BYTES]) for a in range(0, len(data), CHUNK_BYTES)]


def test_builder_writes_a_correct_side_file(tmp_path):
    docs = make_docs(300)
    with TokenWriter(str(tmp_path / "t"), np.int32) as w:  # pieces of every size across chunk boundaries
        for d in docs[:100]:
            w.add_document(d)
        w.add_documents(np.concatenate(docs[100:]), [d.size for d in docs[100:]])
        w.add_item(np.arange(CHUNK_BYTES, dtype=np.int32))  # several whole chunks in one write
        w.end_document()
    assert_side_file_matches(open_storage(str(tmp_path)), "t")
    merge_datasets([str(tmp_path / "t"), str(tmp_path / "t")], str(tmp_path / "m"))  # add_index copies
    assert_side_file_matches(open_storage(str(tmp_path)), "m")


def test_preprocess_cli_writes_a_correct_side_file(tmp_path):
    src = tmp_path / "a.jsonl"
    src.write_text("".join(f'{{"text": "document {i} {"x" * (i * 37 % 3000)}"}}\n' for i in range(400)))
    out = tmp_path / "out"
    r = subprocess.run(
        [sys.executable, "-m", "energon_arrow", "preprocess", "--input", str(src), "--output-prefix",
         str(out / "p"), "--tokenizer", "byte", "--append-eod", "--workers", "2"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(out)) == [f"p_text_document.{e}" for e in ("bin", "crc", "idx")]
    assert_side_file_matches(open_storage(str(out)), "p_text_document")


def test_a_failed_side_file_write_publishes_nothing(tmp_path, monkeypatch):
    prefix = str(tmp_path / "t")
    write(prefix, make_docs(5))
    before = {n: (tmp_path / n).read_bytes() for n in os.listdir(tmp_path)}

    def broken(sink, chunks, idx):
        sink.write(b"half")
        raise OSError("disk full")

    monkeypatch.setattr("energon_arrow.tokens.builder.write_side_file", broken)
    with pytest.raises(OSError, match="disk full"):
        write(prefix, make_docs(7, seed=1))
    assert {
        n: (tmp_path / n).read_bytes() for n in os.listdir(tmp_path)
    } == before  # no temporary left either


def test_a_flipped_byte_in_a_local_copy_is_detected(tmp_path):
    docs = make_docs(200)
    prefix = str(tmp_path / "t")
    write(prefix, docs)
    ds = IndexedTokens(prefix)
    assert ds.checksums is None  # local reads are unverified by default
    with open(prefix + ".bin", "r+b") as f:
        at = 3 * CHUNK_BYTES + 100
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0x10]))
    doc = int(np.searchsorted(np.cumsum([d.nbytes for d in docs]), at, side="right"))
    ds = IndexedTokens(prefix, verify="crc")
    np.testing.assert_array_equal(ds[0], docs[0])  # chunk 0 is fine
    for read in (lambda: ds[doc], lambda: ds.get_many(np.arange(len(docs)))):
        with pytest.raises(
            ChecksumError, match=r"t\.bin: chunk 3 \(bytes \[196608, 262144\)\) does not match"
        ):
            read()
    with open(prefix + ".idx", "r+b") as f:
        f.seek(40)
        f.write(b"\xff")
    with pytest.raises(ChecksumError, match=r"t\.idx: CRC32C .*t\.crc records"):
        IndexedTokens(prefix, verify="crc", validate=False)


def test_without_a_side_file_a_dataset_loads_as_before(tmp_path, monkeypatch, caplog):
    docs = make_docs(20)
    prefix = str(tmp_path / "t")
    write(prefix, docs)
    os.remove(prefix + ".crc")
    for ds in (IndexedTokens(prefix), IndexedTokens(prefix, {"verify": "none"})):
        assert ds.checksums is None
        np.testing.assert_array_equal(ds.get_many(np.arange(len(docs))), np.concatenate(docs))
    monkeypatch.setenv("ENERGON_ARROW_VERIFY", "crc")
    np.testing.assert_array_equal(IndexedTokens(prefix)[3], docs[3])  # a warning
    assert "reading it unverified" in caplog.text
    for asked in ({"verify": "crc"}, None):
        with pytest.raises(
            ChecksumError, match=r"t\.crc: verify='crc' needs this side file, .*energon-arrow merge"
        ):
            IndexedTokens(prefix, asked, verify=None if asked else "crc")
    with pytest.raises(ValueError, match="verify must be one of crc, none"):
        IndexedTokens(prefix, verify="sha")


def test_a_side_file_of_other_files_is_an_error(tmp_path):
    prefix = str(tmp_path / "t")
    write(prefix, make_docs(20))
    shutil.copy(prefix + ".crc", tmp_path / "old.crc")
    write(prefix, make_docs(30, seed=2))
    shutil.copy(tmp_path / "old.crc", prefix + ".crc")  # the pair rewritten by another tool
    with pytest.raises(ChecksumError, match="the dataset was rewritten without it; delete it"):
        IndexedTokens(prefix, verify="crc")
    assert IndexedTokens(prefix).num_documents == 30  # unverified (local default)


# ---- S3 through the FaultProxy ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def remote(s3_server):
    """A token dataset of 600 documents (~3.5 MB, 55 chunks) on S3: (prefix URL, documents)."""
    docs = make_docs(600, seed=5)
    prefix = f"s3://{s3_server.create_bucket('ea-tests')}/tokcrc-{uuid.uuid4().hex[:8]}/t"
    write(prefix, docs, s3_server.storage_options)
    return prefix, docs


@pytest.fixture
def through(proxy):
    proxy.reset_counts()
    options = {"endpoint_url": proxy.endpoint_url, "key": ACCESS_KEY, "secret": SECRET_KEY}
    yield lambda prefix, extra=None, **kw: IndexedTokens(prefix, {**options, **(extra or {})}, **kw)
    proxy.reset_counts()


def _gets(proxy, suffix: str) -> list[str]:
    return [
        outcome for method, path, _, outcome in proxy.requests if method == "GET" and path.endswith(suffix)
    ]


def _read_all(ds, n: int) -> list[np.ndarray]:
    return [np.array(ds[i]) for i in range(n)]


@pytest.mark.s3
def test_remote_reads_are_verified_by_default_and_damaged_gets_read_again(remote, proxy, through):
    prefix, docs = remote
    proxy.inject_for(".crc", "corrupt_response")
    proxy.inject_for(".idx", "corrupt_response")
    proxy.inject_for(".bin", *["corrupt_response"] * 3)  # the first three ranged GETs of the .bin
    ds = through(prefix, cache_bytes=256 << 10)
    assert ds.checksums is not None
    got = _read_all(ds, len(docs))
    assert all(np.array_equal(a, b) for a, b in zip(got, docs))
    for suffix, damaged in ((".crc", 1), (".idx", 1), (".bin", 3)):
        gets = _gets(proxy, suffix)
        assert gets[: damaged + 1] == ["corrupt_response"] * damaged + ["forwarded"], suffix
        assert gets.count("corrupt_response") == damaged
    assert ds.io_stats()["cached_bytes"] <= 256 << 10
    # the same damage unverified reaches the documents (why the default is on)
    proxy.inject_for(".bin", *["corrupt_response"] * 3)
    ds = through(prefix, cache_bytes=256 << 10, verify="none")
    assert sum(not np.array_equal(a, b) for a, b in zip(_read_all(ds, len(docs)), docs)) > 0


@pytest.mark.s3
def test_a_bin_range_damaged_every_time_is_a_clear_error(remote, proxy, through, s3_server):
    prefix, docs = remote
    ds = through(prefix, {"retries": 2})  # 3 reads
    proxy.inject_for(".bin", *["corrupt_response"] * 3)
    with pytest.raises(ChecksumError) as err:
        ds[len(docs) // 2]
    message = str(err.value)
    assert (
        message.startswith(f"{prefix}.bin: chunk ")
        and f"does not match its CRC32C in {prefix}.crc" in message
    )
    assert "(3 read(s))" in message and "restore the dataset" in message
    assert _gets(proxy, ".bin") == ["corrupt_response"] * 3
    proxy.reset_counts()
    np.testing.assert_array_equal(ds[len(docs) // 2], docs[len(docs) // 2])  # nothing damaged was cached


@pytest.mark.s3
def test_an_idx_damaged_every_time_is_a_clear_error_and_never_cached(remote, proxy, through, tmp_path):
    """(A whole-object GET is checked by the S3 client already when the store returns the x-amz-checksum the
    upload recorded: the error then names that check; the side file's CRC catches the others.)"""
    prefix, _ = remote
    proxy.inject_for(".idx", *["corrupt_response"] * 5)
    with pytest.raises(OSError, match=rf"^{prefix}\.idx: .*(BodyChecksumMismatch|CRC32C)"):
        through(prefix, idx_cache_dir=tmp_path)
    assert os.listdir(tmp_path) == []
    proxy.reset_counts()
    assert through(prefix, idx_cache_dir=tmp_path).num_documents == 600


@pytest.mark.s3
def test_a_remote_dataset_without_side_file_loads_as_before(s3_server, through):
    docs = make_docs(30, seed=9)
    prefix = f"s3://{s3_server.create_bucket('ea-tests')}/tokcrc-{uuid.uuid4().hex[:8]}/t"
    write(prefix, docs, s3_server.storage_options)
    open_storage(prefix.rpartition("/")[0], s3_server.storage_options).remove("t.crc")
    ds = through(prefix)
    assert ds.checksums is None
    assert all(np.array_equal(a, b) for a, b in zip(_read_all(ds, len(docs)), docs))


def test_chunk_crcs_match_one_pass_for_any_write_sizes():
    rng = np.random.default_rng(3)
    data = rng.integers(0, 256, 5 * CHUNK_BYTES + 123, dtype=np.uint8).tobytes()
    for cuts in ([], [1, CHUNK_BYTES - 1, CHUNK_BYTES, 3 * CHUNK_BYTES + 7], list(range(0, len(data), 9999))):
        spool: list = []
        crcs = ChunkCrcs(spool, CHUNK_BYTES)
        for a, b in zip([0, *cuts], [*cuts, len(data)]):
            crcs.update(data[a:b])
        crcs.finish()
        want = [crc32c(data[a : a + CHUNK_BYTES]) for a in range(0, len(data), CHUNK_BYTES)]
        assert np.concatenate(spool).tolist() == want and crcs.size == len(data)
