"""Every walk of the indexer records the CRC32C of each part's payload (tar.crc), from the bytes it already reads."""

import tarfile
import uuid

import numpy as np
import pytest

from energon_arrow.adapters import open_storage
from energon_arrow.tar import index_bytes, index_shard
from energon_arrow.tar.crc import crc32c, part_crcs
from energon_arrow.testing.synthetic import shard_bytes
from tests.tar.edge_tars import build_tar, edge_tar, energon_view, our_view


def test_crc32c_is_castagnoli():
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value (RFC 3720)
    assert crc32c(b"6789", crc32c(b"12345")) == 0xE3069283
    data = b"abcdefgh" * 100
    assert part_crcs(np.frombuffer(data, np.uint8), np.array([0, 3, 800]), np.array([10, 0, 0])).tolist() == [
        crc32c(data[:10]),
        0,
        0,
    ]


def _expected(data: bytes, index) -> list[int]:
    """The CRC32C of each part as energon 7.4.1 reads the shard (its payload offsets and sizes)."""
    return [crc32c(data[o : o + z]) for _, _, _, o, z in energon_view(data)[1]]


def _shards() -> dict[str, bytes]:
    long_names = build_tar(
        [(f"{'d' * 120}/k{i}.txt", bytes([i]) * (600 + i)) for i in range(5)], tarfile.GNU_FORMAT
    )
    return {
        "plain": shard_bytes(0, 30, 700),
        "pax": edge_tar(tarfile.PAX_FORMAT),
        "gnu": edge_tar(tarfile.GNU_FORMAT),
        "long": long_names,
        "big": build_tar([(f"k{i}.bin", np.random.default_rng(i).bytes(5000 + 977 * i)) for i in range(12)]),
    }


def _check(index, data: bytes, name: str) -> None:
    assert our_view(index) == energon_view(data), name
    assert index.part_crcs is not None, name
    assert index.part_crcs.dtype == np.uint32
    assert index.part_crcs.tolist() == _expected(data, index), name


@pytest.mark.parametrize(
    "where", ["local", "memory-whole", "memory-general", "memory-1", "memory-3", "memory-64"]
)
def test_every_walk_records_the_part_crcs(tmp_path, monkeypatch, where):
    import energon_arrow.tar as tar_pkg

    if where == "local":
        store = open_storage(str(tmp_path / "root"))
        store.makedirs("")
    else:
        store = open_storage(f"memory://ea-crc-{uuid.uuid4().hex[:8]}")
        if where != "memory-whole":
            monkeypatch.setattr(tar_pkg, "WHOLE_READ_LIMIT", 0)
            blocks = 0 if where == "memory-general" else int(where.split("-")[1])
            monkeypatch.setattr(tar_pkg, "STREAM_WINDOW", 512 * blocks)  # 0: the sliding-window general walk
    for name, data in _shards().items():
        store.write_atomic(f"{name}.tar", data)
        _check(index_shard(store, f"{name}.tar", block_size=4096), data, f"{where}/{name}")


def test_index_bytes_records_the_part_crcs():
    for name, data in _shards().items():
        _check(index_bytes(data, name), data, name)


@pytest.mark.parametrize("kernel", [True, False])
def test_part_crcs_of_many_ranges_equal_the_packages_values(monkeypatch, kernel):
    """The C kernel (one call for every range, GIL released) and the per-part package calls give the same CRCs,
    empty and unaligned ranges included; a range outside the buffer is an error, not a read past its end."""
    from crc32c import crc32c

    from energon_arrow.tar import crc

    if kernel and not crc._KERNEL:
        pytest.skip("the C kernel is not built here, or the CPU has no CRC32 instructions")
    monkeypatch.setattr(crc, "_KERNEL", kernel)
    rng = np.random.default_rng(3)
    data = rng.integers(0, 256, 1 << 16, dtype=np.uint8).tobytes()
    starts = rng.integers(0, 1 << 15, 300)
    sizes = rng.integers(0, 1 << 15, 300)
    sizes[:5] = 0
    got = crc.part_crcs(memoryview(data), starts, sizes)
    assert got.dtype == np.uint32
    assert got.tolist() == [crc32c(data[a : a + n]) for a, n in zip(starts.tolist(), sizes.tolist())]
    if kernel:
        with pytest.raises(ValueError, match="outside the buffer"):
            crc.part_crcs(data, np.array([10]), np.array([len(data)]))
