"""TokenWriter and merge: round trips on every backend, spilled spools, atomic publication, input checks."""

from __future__ import annotations

import numpy as np
import pytest

from energon_arrow.adapters import open_storage
from energon_arrow.tokens.builder import TokenWriter, merge_datasets
from energon_arrow.tokens.indexed import IndexedTokens
from energon_arrow.tokens.spool import ArraySpool
from tests.tokens.test_reader import raw_pair


def random_docs(rng, n):
    return [
        [rng.integers(0, 1000, int(rng.integers(0, 50))) for _ in range(int(rng.integers(0, 3)))]
        for _ in range(n)
    ]


def write_docs(prefix, docs, dtype=np.uint16, options=None, **kw):
    with TokenWriter(prefix, dtype, storage_options=options, **kw) as w:
        for d in docs:
            if d:
                w.add_document(np.concatenate(d), [s.size for s in d])
            else:
                w.end_document()
    return prefix


def assert_matches(ds, docs):
    assert ds.num_documents == len(docs)
    flat = [s for d in docs for s in d]
    assert len(ds) == len(flat)
    for i, s in enumerate(flat):
        np.testing.assert_array_equal(ds[i], s)
    assert ds.document_indices.tolist() == np.concatenate([[0], np.cumsum([len(d) for d in docs])]).tolist()


def test_round_trip_on_every_backend(any_storage):
    rng = np.random.default_rng(0)
    docs = random_docs(rng, 50)
    prefix = any_storage.url_of("sub/out")
    write_docs(prefix, docs, options=any_storage.storage_options)
    # the pair equals the hand-assembled reference bytes
    data, idx = raw_pair(docs)
    assert any_storage.read_bytes("sub/out.bin") == data
    assert any_storage.read_bytes("sub/out.idx") == idx
    assert_matches(IndexedTokens(prefix, any_storage.storage_options), docs)
    assert sorted(any_storage.list_files("sub/*")) == ["sub/out.bin", "sub/out.crc", "sub/out.idx"]


def test_spilled_spools_give_the_same_bytes(tmp_path):
    rng = np.random.default_rng(1)
    docs = random_docs(rng, 3000)
    write_docs(str(tmp_path / "a"), docs)
    write_docs(str(tmp_path / "b"), docs, spool_memory_bytes=64)
    for ext in (".bin", ".idx"):
        assert (tmp_path / f"a{ext}").read_bytes() == (tmp_path / f"b{ext}").read_bytes()


def test_spool_streams_back_in_order(tmp_path):
    spool = ArraySpool(np.int64, str(tmp_path / "s"), memory_bytes=40)
    for k in range(20):
        spool.append(np.arange(k * 3, k * 3 + 3))
    assert (tmp_path / "s").exists()
    assert np.concatenate(list(spool.chunks())).tolist() == list(range(60))
    spool.close()
    assert not (tmp_path / "s").exists()


def test_exception_leaves_previous_pair_untouched(any_storage):
    prefix = any_storage.url_of("keep")
    opts = any_storage.storage_options
    write_docs(prefix, [[np.array([1, 2, 3])]], options=opts)
    before = [any_storage.read_bytes(f"keep.{e}") for e in ("bin", "crc", "idx")]
    with pytest.raises(RuntimeError, match="boom"), TokenWriter(prefix, np.uint16, storage_options=opts) as w:
        w.add_document(np.arange(100))
        raise RuntimeError("boom")
    assert [any_storage.read_bytes(f"keep.{e}") for e in ("bin", "crc", "idx")] == before
    assert sorted(any_storage.list_files("*")) == ["keep.bin", "keep.crc", "keep.idx"]


def test_abort_leaves_nothing(any_storage):
    w = TokenWriter(any_storage.url_of("gone"), np.int32, storage_options=any_storage.storage_options)
    w.add_document(np.arange(10))
    w.abort()
    assert any_storage.list_files("**/*") == []
    with pytest.raises(ValueError, match="already finalized or aborted"):
        w.add_document(np.arange(3))


def test_input_checks(tmp_path):
    w = TokenWriter(str(tmp_path / "c"), np.uint16)
    with pytest.raises(ValueError, match=r"token values \[0, 70000\] do not fit uint16"):
        w.add_document(np.array([0, 70000]))
    with pytest.raises(ValueError, match="do not partition"):
        w.add_document(np.arange(5), [2, 2])
    with pytest.raises(ValueError, match="sequence lengths sum to 4, not 5"):
        w.add_documents(np.arange(5), [2, 2])
    with pytest.raises(ValueError, match="sequences_per_document sums to 3"):
        w.add_documents(np.arange(5), [2, 3], [3])
    w.add_item(np.arange(3))
    with pytest.raises(ValueError, match="not closed by end_document"):
        w.finalize()
    w.abort()
    with pytest.raises(ValueError, match="no Megatron dtype code"):
        TokenWriter(str(tmp_path / "d"), np.uint32)
    assert list(tmp_path.iterdir()) == []


def test_bulk_documents_with_empty_ones(tmp_path):
    with TokenWriter(str(tmp_path / "b"), np.int32) as w:
        w.add_documents(np.arange(10), [3, 0, 7], [0, 2, 0, 1])
        w.add_item(np.array([5]))
        w.end_document()
    ds = IndexedTokens(str(tmp_path / "b"))
    assert ds.document_indices.tolist() == [0, 0, 2, 2, 3, 4]
    assert ds.sequence_lengths.tolist() == [3, 0, 7, 1]
    assert ds[2].tolist() == list(range(3, 10))


def test_merge_across_backends(tmp_path, any_storage):
    rng = np.random.default_rng(3)
    opts = any_storage.storage_options
    all_docs, parts = [], []
    for k in range(5):
        docs = random_docs(rng, int(rng.integers(0, 30)))
        parts.append(write_docs(any_storage.url_of(f"parts/p{k}"), docs, options=opts))
        all_docs += docs
    out = any_storage.url_of("merged/all")
    summary = merge_datasets(parts, out, opts, spool_memory_bytes=64)
    assert summary["documents"] == len(all_docs)
    assert_matches(IndexedTokens(out, opts), all_docs)
    data, idx = raw_pair(all_docs)
    assert any_storage.read_bytes("merged/all.idx") == idx
    assert any_storage.read_bytes("merged/all.bin") == data


def test_merge_rejects_mismatched_parts(tmp_path):
    a = write_docs(str(tmp_path / "a"), [[np.arange(3)]], dtype=np.uint16)
    b = write_docs(str(tmp_path / "b"), [[np.arange(3)]], dtype=np.int32)
    with pytest.raises(ValueError, match=r"b\.idx: dtype int32 differs from the output's uint16"):
        merge_datasets([a, b], str(tmp_path / "m"))
    assert not (tmp_path / "m.bin").exists() and not (tmp_path / "m.idx").exists()
    with open(tmp_path / "a.bin", "ab") as f:
        f.write(b"xx")
    with pytest.raises(ValueError, match="cannot append it"):
        merge_datasets([a], str(tmp_path / "m"))
    with pytest.raises(ValueError, match="at least one"):
        merge_datasets([], str(tmp_path / "m"))


@pytest.mark.s3
def test_s3_write_is_invisible_until_finalize(s3_root):
    url, opts = s3_root
    storage = open_storage(url, opts)
    w = TokenWriter(storage.url_of("w"), np.uint16, storage_options=opts)
    w.add_documents(np.zeros(10_000_000, np.uint16), [5_000_000, 5_000_000])  # 20 MB: a multipart upload
    assert not storage.exists("w.bin") and not storage.exists("w.idx")
    w.finalize()
    assert storage.stat("w.bin").size == 20_000_000
    assert IndexedTokens(storage.url_of("w"), opts).num_documents == 2
