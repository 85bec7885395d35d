"""IndexedTokens over local, memory:// and S3 prefixes: arrays, get, slices, get_many, caches, pickling."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from energon_arrow.adapters import open_storage
from energon_arrow.tokens.idx_format import pack_header, sequence_pointers
from energon_arrow.tokens.indexed import IndexedTokens


def raw_pair(docs, dtype=np.uint16, modes=None):
    """Hand-assembled .bin/.idx bytes (independent of the writer): docs is a list of lists of sequences."""
    seqs = [np.asarray(s, dtype) for d in docs for s in d]
    lengths = np.array([s.size for s in seqs], np.int32)
    di = np.concatenate([[0], np.cumsum([len(d) for d in docs])]).astype(np.int64)
    idx = (
        pack_header(dtype, len(seqs), di.size)
        + lengths.tobytes()
        + sequence_pointers(lengths, np.dtype(dtype).itemsize).tobytes()
        + di.tobytes()
        + (np.asarray(modes, np.int8).tobytes() if modes is not None else b"")
    )
    data = b"".join(s.tobytes() for s in seqs)
    return data, idx


def put(storage, name, docs, **kw):
    data, idx = raw_pair(docs, **kw)
    storage.write_atomic(f"{name}.bin", data)
    storage.write_atomic(f"{name}.idx", idx)
    return storage.url_of(name)


EXAMPLE = [[[1, 2, 3]], [[4, 5], [6, 7, 8]], [[9]]]


def test_example_layout_matches_reference_description(any_storage):
    prefix = put(any_storage, "ex", EXAMPLE)
    assert any_storage.stat("ex.idx").size == 114
    ds = IndexedTokens(prefix, any_storage.storage_options)
    assert len(ds) == 4 and ds.num_documents == 3 and ds.dtype == np.uint16
    assert ds.sequence_lengths.tolist() == [3, 2, 3, 1]
    assert ds.sequence_pointers.tolist() == [0, 6, 10, 16]
    assert ds.document_indices.tolist() == [0, 1, 3, 4]
    assert ds.sequence_modes is None and not ds.multimodal
    assert ds[1].tolist() == [4, 5]
    assert ds[-1].tolist() == [9]
    assert ds.get(2, 1).tolist() == [7, 8]
    assert ds.get(2, 1, 1).tolist() == [7]
    assert [a.tolist() for a in ds[1:3]] == [[4, 5], [6, 7, 8]]
    assert ds.document_lengths().tolist() == [3, 5, 1]
    assert ds.document_sequences(1) == (1, 3)
    got = ds.get_many([2, 0, 3, 2], [1, 0, 0, 0], [2, 3, 1, 1])
    assert got.tolist() == [7, 8, 1, 2, 3, 9, 6]
    with pytest.raises(IndexError, match="outside sequence 2"):
        ds.get_many([2], [2], [2])
    with pytest.raises(IndexError, match="out of range"):
        ds.get(4)


@pytest.mark.parametrize(
    "dtype", [np.uint8, np.int8, np.int16, np.int32, np.int64, np.float64, np.float32, np.uint16]
)
def test_every_dtype_and_get_many_matches_slices(local_root, dtype):
    storage = open_storage(local_root[0])
    rng = np.random.default_rng(1)
    docs = [
        [rng.integers(0, 100, rng.integers(0, 40)).tolist() for _ in range(rng.integers(1, 4))]
        for _ in range(60)
    ]
    prefix = put(storage, "d", docs, dtype=dtype)
    ds = IndexedTokens(prefix)
    flat = [np.asarray(s, dtype) for d in docs for s in d]
    assert ds.dtype == np.dtype(dtype)
    for i, s in enumerate(flat):
        np.testing.assert_array_equal(ds[i], s)
    ids = rng.integers(0, len(flat), 500)
    lens = ds.sequence_lengths[ids].astype(np.int64)
    offs = (rng.random(500) * (lens + 1)).astype(np.int64)
    takes = (rng.random(500) * (lens - offs + 1)).astype(np.int64)
    want = np.concatenate([flat[i][o : o + t] for i, o, t in zip(ids, offs, takes)])
    np.testing.assert_array_equal(ds.get_many(ids, offs, takes), want)
    buf = np.full(want.size + 5, 7, dtype)
    res = ds.get_many(ids, offs, takes, out=buf)
    assert res.base is buf or res.base is buf.base or np.shares_memory(res, buf)
    np.testing.assert_array_equal(buf[: want.size], want)


def test_get_many_long_and_short_pieces_local(local_root):
    """Pieces of 0 to ~300 tokens (strided-row and token-by-token gathers mixed) and very long pieces (slice
    copies) all match plain slicing, into a fresh array and into a larger `out` buffer."""
    storage = open_storage(local_root[0])
    rng = np.random.default_rng(7)
    docs = [[rng.integers(0, 60_000, rng.integers(0, 300)).tolist()] for _ in range(80)]
    docs += [[rng.integers(0, 60_000, 20_000).tolist()] for _ in range(3)]
    prefix = put(storage, "long", docs, dtype=np.uint16)
    ds = IndexedTokens(prefix)
    flat = [np.asarray(d[0], np.uint16) for d in docs]
    for ids in (rng.integers(0, 80, 400), rng.integers(0, len(flat), 400), np.array([80, 81, 82, 80])):
        lens = ds.sequence_lengths[ids].astype(np.int64)
        offs = (rng.random(ids.size) * (lens + 1)).astype(np.int64)
        takes = (rng.random(ids.size) * (lens - offs + 1)).astype(np.int64)
        want = np.concatenate([flat[i][o : o + t] for i, o, t in zip(ids, offs, takes)])
        np.testing.assert_array_equal(ds.get_many(ids, offs, takes), want)
        buf = np.full(want.size + 70, 7, np.uint16)
        ds.get_many(ids, offs, takes, out=buf)
        np.testing.assert_array_equal(buf[: want.size], want)
        assert (buf[want.size :] == 7).all()


def test_multimodal_modes_detected(any_storage):
    prefix = put(any_storage, "mm", EXAMPLE, modes=[0, 1, 2, 1])
    ds = IndexedTokens(prefix, any_storage.storage_options)
    assert ds.multimodal
    assert ds.sequence_modes.tolist() == [0, 1, 2, 1]
    seq, mode = ds[2]
    assert seq.tolist() == [6, 7, 8] and mode == 2
    with pytest.raises(ValueError, match="truncated"):
        IndexedTokens(put(any_storage, "plain", EXAMPLE), any_storage.storage_options, multimodal=True)


def test_empty_dataset_and_empty_documents(local_root):
    storage = open_storage(local_root[0])
    ds = IndexedTokens(put(storage, "e", []))
    assert len(ds) == 0 and ds.num_documents == 0 and ds.get_many([]).size == 0
    ds = IndexedTokens(put(storage, "ed", [[], [[1, 2]], [], [[]]]))
    assert ds.document_indices.tolist() == [0, 0, 1, 1, 2]
    assert ds.document_lengths().tolist() == [0, 2, 0, 0]
    assert ds[1].size == 0


@pytest.mark.s3
def test_s3_reads_only_needed_bytes_and_caches(s3_root, tmp_path):
    url, options = s3_root
    storage = open_storage(url, options)
    rng = np.random.default_rng(2)
    docs = [[rng.integers(0, 60000, 500).tolist()] for _ in range(200)]
    prefix = put(storage, "big", docs)
    ds = IndexedTokens(prefix, options, idx_cache_dir=tmp_path / "idx")
    assert len(list((tmp_path / "idx").iterdir())) == 1
    ids = np.array([5, 150, 42])
    got = ds.get_many(ids, [10, 0, 499], [20, 100, 1])
    want = np.concatenate([np.asarray(docs[5][0][10:30]), docs[150][0][:100], docs[42][0][499:]])
    np.testing.assert_array_equal(got, want)
    assert ds.io_stats()["bytes_fetched"] == 2 * (20 + 100 + 1)
    ds.get_many([150], [10], [50])  # inside the cached extent of the second piece
    stats = ds.io_stats()
    assert stats["cache_hits"] == 1 and stats["bytes_fetched"] == 2 * 121
    again = pickle.loads(pickle.dumps(ds))
    np.testing.assert_array_equal(again[7], docs[7][0])


@pytest.mark.s3
def test_s3_cache_is_bounded(s3_root):
    url, options = s3_root
    storage = open_storage(url, options)
    docs = [[list(range(1000))] for _ in range(50)]
    ds = IndexedTokens(put(storage, "b", docs), options, cache_bytes=5000)
    for i in range(50):
        assert ds[i].tolist() == docs[i][0]
    assert ds.io_stats()["cached_bytes"] <= 5000


def test_pickle_local(local_root):
    storage = open_storage(local_root[0])
    ds = IndexedTokens(put(storage, "p", EXAMPLE))
    again = pickle.loads(pickle.dumps(ds))
    assert again[2].tolist() == [6, 7, 8]
