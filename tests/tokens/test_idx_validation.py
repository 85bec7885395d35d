"""Open-time validation: corrupt .idx/.bin pairs fail with errors naming the file and byte offset."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from energon_arrow.adapters import open_storage
from energon_arrow.tokens.idx_format import IndexFormatError, dtype_code, optimal_dtype
from energon_arrow.tokens.indexed import IndexedTokens
from tests.tokens.test_reader import EXAMPLE, raw_pair


def write(tmp_path, data, idx, name="x"):
    (tmp_path / f"{name}.bin").write_bytes(data)
    (tmp_path / f"{name}.idx").write_bytes(idx)
    return str(tmp_path / name)


def patched(idx: bytes, offset: int, new: bytes) -> bytes:
    return idx[:offset] + new + idx[offset + len(new) :]


@pytest.fixture
def pair():
    return raw_pair(EXAMPLE)


def test_bad_magic(tmp_path, pair):
    data, idx = pair
    with pytest.raises(IndexFormatError, match=r"x\.idx at byte offset 0: bad magic"):
        IndexedTokens(write(tmp_path, data, patched(idx, 0, b"NOTIDX")))


def test_bad_version(tmp_path, pair):
    data, idx = pair
    with pytest.raises(IndexFormatError, match="offset 9: unsupported version 2"):
        IndexedTokens(write(tmp_path, data, patched(idx, 9, struct.pack("<Q", 2))))


def test_bad_dtype_code(tmp_path, pair):
    data, idx = pair
    with pytest.raises(IndexFormatError, match="offset 17: unknown dtype code 9"):
        IndexedTokens(write(tmp_path, data, patched(idx, 17, b"\x09")))


def test_truncated_idx(tmp_path, pair):
    data, idx = pair
    with pytest.raises(
        IndexFormatError, match="offset 100: truncated .idx: 100 bytes, the header requires 114"
    ):
        IndexedTokens(write(tmp_path, data, idx[:100]))
    with pytest.raises(IndexFormatError, match="truncated header"):
        IndexedTokens(write(tmp_path, data, idx[:20]))


def test_trailing_garbage(tmp_path, pair):
    data, idx = pair
    with pytest.raises(IndexFormatError, match="3 unexpected trailing bytes"):
        IndexedTokens(write(tmp_path, data, idx + b"abc"))


def test_short_bin(tmp_path, pair):
    data, idx = pair
    with pytest.raises(
        IndexFormatError, match=r"x\.bin at byte offset 16: .bin is 16 bytes but sequence 3 ends at byte 18"
    ):
        IndexedTokens(write(tmp_path, data[:-2], idx))


def test_non_monotonic_document_indices(tmp_path, pair):
    data, idx = pair
    # document_indices start at 34 + 12*4 = 82; make entry 2 smaller than entry 1
    bad = patched(idx, 82 + 16, struct.pack("<q", 0))
    with pytest.raises(
        IndexFormatError, match="offset 98: document_indices not monotonic: entry 2 is 0 after 1"
    ):
        IndexedTokens(write(tmp_path, data, bad))
    with pytest.raises(IndexFormatError, match="must start at 0"):
        IndexedTokens(write(tmp_path, data, patched(idx, 82, struct.pack("<q", 1))))
    with pytest.raises(IndexFormatError, match="expected the sequence count 4"):
        IndexedTokens(write(tmp_path, data, patched(idx, 82 + 24, struct.pack("<q", 3))))


def test_bad_lengths_and_pointers(tmp_path, pair):
    data, idx = pair
    with pytest.raises(IndexFormatError, match="offset 38: sequence 1 has negative length"):
        IndexedTokens(write(tmp_path, data, patched(idx, 38, struct.pack("<i", -1))))
    with pytest.raises(IndexFormatError, match="sequence 1 pointer is not a multiple of 2"):
        IndexedTokens(write(tmp_path, data, patched(idx, 50 + 8, struct.pack("<q", 5))))


def test_missing_files_name_the_url(tmp_path, pair):
    data, idx = pair
    (tmp_path / "only.idx").write_bytes(idx)
    with pytest.raises(Exception, match=r"only\.bin"):
        IndexedTokens(str(tmp_path / "only"))
    assert not IndexedTokens.exists(str(tmp_path / "only"))


@pytest.mark.s3
def test_validation_on_s3(s3_root, pair):
    url, options = s3_root
    storage = open_storage(url, options)
    data, idx = pair
    storage.write_atomic("y.bin", data)
    storage.write_atomic("y.idx", patched(idx, 17, b"\x00"))
    with pytest.raises(IndexFormatError, match=r"s3://.*/y\.idx at byte offset 17"):
        IndexedTokens(storage.url_of("y"), options)


def test_dtype_helpers():
    assert dtype_code(np.uint16) == 8 and dtype_code(np.float64) == 6
    with pytest.raises(ValueError, match="no Megatron dtype code"):
        dtype_code(np.uint32)
    assert (
        optimal_dtype(50257) == np.uint16
        and optimal_dtype(65500) == np.int32
        and optimal_dtype(None) == np.int32
    )


def _window_reader(idx: bytes):
    raw = np.frombuffer(idx, np.uint8)
    return lambda offset, dtype, first, count: raw[
        offset + first * dtype.itemsize : offset + (first + count) * dtype.itemsize
    ].view(dtype)


@pytest.mark.parametrize("window", [1, 2, 3, 1 << 16])
def test_windowed_checks_name_the_same_entry_at_any_window_size(window):
    """Every check carries across window boundaries: the first bad entry is named whatever the window."""
    from energon_arrow.tokens.idx_format import check_arrays, parse_header

    n = 9
    lengths = np.arange(1, n + 1, dtype=np.int32)
    pointers = np.concatenate([[0], np.cumsum(lengths[:-1].astype(np.int64) * 2)])
    docs = np.arange(n + 1, dtype=np.int64)

    def idx(lengths=lengths, pointers=pointers, docs=docs):
        head = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, dtype_code(np.uint16), n, docs.size)
        return head + lengths.tobytes() + pointers.tobytes() + docs.tobytes()

    def check(data, bin_size=10**6):
        check_arrays(
            parse_header(data[:34], "t.idx"), _window_reader(data), bin_size, "t.idx", "t.bin", window
        )

    check(idx())
    bad_docs = docs.copy()
    bad_docs[5] = 3  # entry 5 after 4: the step down may sit on a window edge
    with pytest.raises(IndexFormatError, match=f"offset {34 + 12 * n + 40}: .* entry 5 is 3 after 4"):
        check(idx(docs=bad_docs))
    bad_lengths = lengths.copy()
    bad_lengths[[4, 7]] = -1
    with pytest.raises(IndexFormatError, match=f"offset {34 + 16}: sequence 4 has negative length"):
        check(idx(lengths=bad_lengths))
    bad_pointers = pointers.copy()
    bad_pointers[6] = -2
    with pytest.raises(IndexFormatError, match="sequence 6 has a negative pointer"):
        check(idx(pointers=bad_pointers))
    bad_pointers[6] = 3
    with pytest.raises(IndexFormatError, match="sequence 6 pointer is not a multiple of 2"):
        check(idx(pointers=bad_pointers))
    end = int(pointers[-1] + 2 * lengths[-1])
    with pytest.raises(IndexFormatError, match=f"sequence {n - 1} ends at byte {end}"):
        check(idx(), bin_size=end - 1)
