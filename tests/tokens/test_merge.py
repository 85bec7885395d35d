"""Merging many parts: spilled index spools, truncated parts (max_documents), multimodal parts."""

from __future__ import annotations

import numpy as np
import pytest

from energon_arrow.tokens.builder import TokenWriter, merge_datasets
from energon_arrow.tokens.indexed import IndexedTokens
from tests.tokens.test_reader import raw_pair


@pytest.mark.heavy
def test_merge_300_parts_with_spilling(tmp_path):
    rng = np.random.default_rng(5)
    parts, docs = [], []
    for k in range(300):
        part_docs = [[rng.integers(0, 9, int(rng.integers(0, 6)))] for _ in range(int(rng.integers(0, 4)))]
        prefix = str(tmp_path / f"p{k:03d}")
        with TokenWriter(prefix, np.uint16) as w:
            for d in part_docs:
                w.add_document(d[0])
        parts.append(prefix)
        docs += part_docs
    summary = merge_datasets(parts, str(tmp_path / "all"), spool_memory_bytes=128)
    assert summary["documents"] == len(docs)
    data, idx = raw_pair(docs)
    assert (tmp_path / "all.idx").read_bytes() == idx
    assert (tmp_path / "all.bin").read_bytes() == data


def test_add_index_first_documents_only(tmp_path):
    docs = [[np.arange(3)], [np.arange(2), np.arange(4)], [], [np.arange(5)]]
    with TokenWriter(str(tmp_path / "src"), np.int32) as w:
        for d in docs:
            if d:
                w.add_document(np.concatenate(d), [s.size for s in d])
            else:
                w.end_document()
    for k in range(len(docs) + 2):
        with TokenWriter(str(tmp_path / f"cut{k}"), np.int32) as w:
            w.add_index(str(tmp_path / "src"), max_documents=k)
        data, idx = raw_pair(docs[:k], dtype=np.int32)
        assert (tmp_path / f"cut{k}.idx").read_bytes() == idx
        assert (tmp_path / f"cut{k}.bin").read_bytes() == data


def test_merge_multimodal_keeps_modes(tmp_path):
    for k in range(2):
        with TokenWriter(str(tmp_path / f"m{k}"), np.uint8, multimodal=True) as w:
            w.add_document(np.arange(4, dtype=np.uint8), [1, 3], [k, k + 1])
    merge_datasets([str(tmp_path / "m0"), str(tmp_path / "m1")], str(tmp_path / "mm"))
    ds = IndexedTokens(str(tmp_path / "mm"))
    assert ds.multimodal and ds.sequence_modes.tolist() == [0, 1, 1, 2]
    assert ds.document_indices.tolist() == [0, 2, 4]


def test_a_part_with_gaps_in_its_bin_is_refused_with_the_offset(tmp_path):
    from energon_arrow.tokens.idx_format import IndexFormatError

    prefix = str(tmp_path / "a")
    with TokenWriter(prefix, np.uint16) as w:
        w.add_document(np.arange(10, dtype=np.uint16), lengths=[4, 6])
        w.add_document(np.arange(4, dtype=np.uint16))
    # sequence 1 starts at byte 10 instead of 8: a gap of one token in the .bin
    at = IndexedTokens(prefix).header.pointers_offset + 8
    with open(prefix + ".idx", "r+b") as f:
        f.seek(at)
        f.write((10).to_bytes(8, "little"))
    with pytest.raises(IndexFormatError, match="sequence 1 is not stored contiguously") as err:
        merge_datasets([prefix], str(tmp_path / "m"))
    assert err.value.offset == at
