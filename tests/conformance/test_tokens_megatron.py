"""Byte equality with megatron-core's IndexedDatasetBuilder, and each side reading the other's files."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from energon_arrow.tokens.builder import TokenWriter, merge_datasets
from energon_arrow.tokens.indexed import IndexedTokens

pytestmark = pytest.mark.conformance

ALL_DTYPES = [np.uint8, np.int8, np.int16, np.int32, np.int64, np.float64, np.float32, np.uint16]


@pytest.fixture(scope="module")
def megatron():
    from megatron.core.datasets import indexed_dataset
    from megatron.core.msc_utils import MultiStorageClientFeature

    MultiStorageClientFeature.disable()  # plain local I/O, as the reference format describes
    return indexed_dataset


def random_ops(rng, multimodal: bool, n_docs: int = 40):
    """A random script of builder calls: add_document (multi-sequence, empty), add_item + end_document."""
    ops = []
    for _ in range(n_docs):
        kind = rng.integers(0, 3)
        n_seq = int(rng.integers(0, 4))
        seqs = [rng.integers(0, 120, int(rng.integers(0, 30))) for _ in range(n_seq)]
        modes = rng.integers(0, 3, n_seq).tolist() if multimodal else None
        if kind == 0 and n_seq:
            ops.append(("doc", seqs, modes))
        else:
            ops.append(("items", seqs, modes))
    return ops


def apply_ops(builder, ops, multimodal):
    for kind, seqs, modes in ops:
        if kind == "doc":
            tokens = np.concatenate(seqs)
            lengths = [s.size for s in seqs]
            builder.add_document(torch.from_numpy(tokens), lengths, modes)
        else:
            for k, s in enumerate(seqs):
                if multimodal:
                    builder.add_item(torch.from_numpy(s), modes[k])
                else:
                    builder.add_item(torch.from_numpy(s))
            builder.end_document()


def megatron_build(megatron, prefix, dtype, multimodal, ops):
    b = megatron.IndexedDatasetBuilder(f"{prefix}.bin", dtype=dtype, multimodal=multimodal)
    apply_ops(b, ops, multimodal)
    b.finalize(f"{prefix}.idx")


def files(prefix):
    with open(f"{prefix}.bin", "rb") as f, open(f"{prefix}.idx", "rb") as g:
        return f.read(), g.read()


@pytest.mark.parametrize("multimodal", [False, True])
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_byte_identical_to_indexed_dataset_builder(megatron, tmp_path, dtype, multimodal):
    rng = np.random.default_rng(ALL_DTYPES.index(dtype) * 2 + multimodal)
    ops = random_ops(rng, multimodal)
    megatron_build(megatron, tmp_path / "ref", dtype, multimodal, ops)
    with TokenWriter(tmp_path / "ours", dtype, multimodal) as w:
        apply_ops(w, ops, multimodal)
    assert files(tmp_path / "ours") == files(tmp_path / "ref")
    # the vectorised bulk path writes the same bytes
    seqs = [s for _, ss, _ in ops for s in ss]
    per_doc = [len(ss) for _, ss, _ in ops]
    modes = [m for _, ss, ms in ops if ms for m in ms] if multimodal else None
    with TokenWriter(tmp_path / "bulk", dtype, multimodal) as w:
        w.add_documents(np.concatenate(seqs), [s.size for s in seqs], per_doc, modes)
    assert files(tmp_path / "bulk") == files(tmp_path / "ref")


@pytest.mark.parametrize("multimodal", [False, True])
def test_merge_identical_to_add_index(megatron, tmp_path, multimodal):
    rng = np.random.default_rng(7)
    parts = []
    for k in range(4):
        p = tmp_path / f"part{k}"
        megatron_build(
            megatron, p, np.uint16, multimodal, random_ops(rng, multimodal, n_docs=int(rng.integers(0, 20)))
        )
        parts.append(str(p))
    ref = megatron.IndexedDatasetBuilder(str(tmp_path / "ref.bin"), dtype=np.uint16, multimodal=multimodal)
    for p in parts:
        ref.add_index(p)
    ref.finalize(str(tmp_path / "ref.idx"))
    summary = merge_datasets(parts, str(tmp_path / "merged"))
    assert files(tmp_path / "merged") == files(tmp_path / "ref")
    assert summary["documents"] == IndexedTokens(str(tmp_path / "ref")).num_documents


@pytest.mark.parametrize("multimodal", [False, True])
def test_megatron_reads_ours_and_we_read_theirs(megatron, tmp_path, multimodal):
    rng = np.random.default_rng(11)
    ops = random_ops(rng, multimodal, n_docs=60)
    megatron_build(megatron, tmp_path / "theirs", np.int32, multimodal, ops)
    with TokenWriter(tmp_path / "ours", np.int32, multimodal) as w:
        apply_ops(w, ops, multimodal)
    ref = megatron.IndexedDataset(str(tmp_path / "ours"), multimodal=multimodal)
    ours = IndexedTokens(str(tmp_path / "theirs"))
    assert ours.multimodal == multimodal
    np.testing.assert_array_equal(ref.sequence_lengths, ours.sequence_lengths)
    np.testing.assert_array_equal(ref.document_indices, ours.document_indices)
    for i in range(len(ref)):
        a, b = ref[i], ours[i]
        if multimodal:
            assert a[1] == b[1]
            a, b = a[0], b[0]
        np.testing.assert_array_equal(a, b)
        if ours.sequence_lengths[i] > 2:
            np.testing.assert_array_equal(
                ref.get(i, 1, 2)[0] if multimodal else ref.get(i, 1, 2), ours.get_many([i], [1], [2])
            )
