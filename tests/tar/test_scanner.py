import tarfile

import numpy as np
import pytest

from energon_arrow.adapters import open_storage
from energon_arrow.tar import TarFormatError, build_shard_index, index_shard, scan_members, scan_members_fast
from energon_arrow.testing.synthetic import shard_bytes
from tests.tar.edge_tars import EDGE_MEMBERS, build_tar, edge_tar, energon_view, gzipped, our_view


@pytest.fixture(params=["local", "memory"])
def store(request, tmp_path):
    if request.param == "local":
        s = open_storage(str(tmp_path / "root"))
    else:
        s = open_storage(f"memory://ea-tar-{tmp_path.name}")
    s.makedirs("")
    return s


def _index(store, data: bytes, name="s.tar"):
    store.write_atomic(name, data)
    return index_shard(store, name)


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT])
def test_edge_members_match_energon(store, fmt):
    data = edge_tar(fmt)
    assert our_view(_index(store, data)) == energon_view(data)


def test_general_walk_matches_fast_walk():
    data = shard_bytes(0, 50, 300)
    arr = np.frombuffer(data, np.uint8)
    fast = scan_members_fast(arr)
    assert fast is not None
    slow = scan_members(lambda o, n: data[o : o + n], len(data), "x")
    assert (
        our_view(build_shard_index(fast, "x")) == our_view(build_shard_index(slow, "x")) == energon_view(data)
    )


def _blocks(data: bytes) -> np.ndarray:
    return np.frombuffer(data, np.uint8)[: len(data) // 512 * 512].reshape(-1, 512)


def _with_header_checksum(data: bytearray, at: int) -> None:
    data[at + 148 : at + 156] = b" " * 8
    data[at + 148 : at + 156] = b"%06o\0 " % sum(data[at : at + 512])


def test_fast_walk_falls_back_from_magic_chain_on_lookalikes_and_v7_headers(store):
    from energon_arrow.tar.fastscan import _magic_chain

    plain = shard_bytes(0, 20, 300)
    assert _magic_chain(_blocks(plain)) is not None  # the cheap walk serves plain shards
    inner = build_tar([("x/in0.txt", b"inner"), ("x/in1.txt", b"i" * 700)], tarfile.USTAR_FORMAT)
    nested = build_tar([("a.tar", inner), ("a.txt", b"1"), ("b.bin", inner)], tarfile.USTAR_FORMAT)
    v7 = bytearray(build_tar([("a.txt", b"1" * 600), ("b.txt", b"2"), ("c.txt", b"3")], tarfile.USTAR_FORMAT))
    at = 512 * 3  # b.txt's header loses its "ustar" magic (an old V7 header)
    v7[at + 257 : at + 265] = bytes(8)
    _with_header_checksum(v7, at)
    for data in (nested, bytes(v7)):
        assert _magic_chain(_blocks(data)) is None
        fast = scan_members_fast(np.frombuffer(data, np.uint8))
        assert fast is not None
        assert our_view(build_shard_index(fast, "x")) == energon_view(data)
        assert our_view(_index(store, data)) == energon_view(data)


def test_compiled_walk_matches_the_vectorised_walk(monkeypatch):
    """The C header walk gives the members of the vectorised walk (or of the general walk) for the plain shards it
    accepts, and declines the rest."""
    import dataclasses

    from energon_arrow.tar import fastscan

    if fastscan._native is None:
        pytest.skip("energon_arrow.tar._headers is not built")
    plain = shard_bytes(0, 20, 300)
    end = energon_view(plain)[0][-1]
    v7 = bytearray(build_tar([("a.txt", b"1" * 600), ("b.txt", b"2")], tarfile.USTAR_FORMAT))
    v7[512 * 3 + 257 : 512 * 3 + 265] = bytes(8)  # no "ustar" magic
    _with_header_checksum(v7, 512 * 3)
    seven = bytearray(plain)
    seven[148:156] = b" " * 8
    seven[148:156] = b"%07o\0" % sum(seven[:512])  # the other usual checksum form
    signed = bytearray(plain)
    signed[100] = 0x90  # a mode byte >= 0x80: the signed sum differs from the unsigned one
    signed[148:156] = b" " * 8
    signed[148:156] = b"%06o\0 " % (sum(signed[:512]) - 256)
    ustar = build_tar([m for m in EDGE_MEMBERS if len(m[0]) < 100], tarfile.USTAR_FORMAT)
    accepted = {
        "plain": plain,
        "no EOF marker": plain[:end],
        "v7": bytes(v7),
        "seven-digit checksum": bytes(seven),
        "ustar with dirs and links": ustar,
        "data after the EOF blocks": plain + b"\1" * 512,
    }
    dirty_eof = plain[: end + 10] + b"\1" + plain[end + 11 :]
    declined = {
        "pax": edge_tar(tarfile.PAX_FORMAT),
        "gnu": edge_tar(tarfile.GNU_FORMAT),
        "signed checksum": bytes(signed),
        "truncated": plain[:700],
        "a non-zero EOF block": dirty_eof,
        "empty tar": bytes(10240),
    }
    for name, data in {**accepted, **declined}.items():
        arr = np.frombuffer(data, np.uint8)
        native = fastscan._native_members(arr)
        with monkeypatch.context() as m:
            m.setattr(fastscan, "_native", None)
            vectorised = scan_members_fast(arr)
        assert (native is not None) == (name in accepted), name
        if native is not None:  # v7: the magic chain ends at the magic-less header, the general walk reads it
            reference = vectorised or scan_members(lambda o, n, d=data: d[o : o + n], len(data), name)
            for a, b in zip(dataclasses.astuple(native), dataclasses.astuple(reference)):
                assert a.equals(b) if hasattr(a, "equals") else np.array_equal(a, b), name


def test_ustar_prefix_global_pax_and_no_eof_marker(store):
    members = [(f"{'p' * 90}/{'q' * 60}/k{i}.txt", b"v" * i) for i in range(3)]
    data = build_tar(members, tarfile.USTAR_FORMAT)
    assert our_view(_index(store, data)) == energon_view(data)
    with_global = build_tar(
        [("a.txt", b"1"), ("b.txt", b"22")], tarfile.PAX_FORMAT, pax_headers={"comment": "hi"}
    )
    assert our_view(_index(store, with_global)) == energon_view(with_global)
    end = energon_view(data)[0][-1]
    assert our_view(_index(store, data[:end])) == energon_view(data)


def test_pax_size_override_and_base256_size(store):
    data = bytearray(build_tar([("a.txt", b"hello"), ("b.txt", b"x" * 700)], tarfile.USTAR_FORMAT))
    hdr = data[512 * 2 : 512 * 3]  # header of b.txt (a.txt: header + one data block)
    hdr[124:136] = b"\x80" + (700).to_bytes(11, "big")
    hdr[148:156] = b" " * 8
    hdr[148:156] = b"%06o\0 " % sum(hdr)
    data[512 * 2 : 512 * 3] = hdr
    assert our_view(_index(store, bytes(data))) == energon_view(bytes(data))


def _error(store, data: bytes, name="bad.tar") -> TarFormatError:
    with pytest.raises(TarFormatError) as info:
        _index(store, data, name)
    assert name in str(info.value)
    return info.value


def test_bad_shards_name_member_and_offset(store):
    good = build_tar([("k0.txt", b"a" * 1000), ("k1.txt", b"b" * 10)], tarfile.USTAR_FORMAT)
    assert "empty file" in str(_error(store, b""))
    assert "empty tar" in str(_error(store, bytes(10240)))
    assert "gzip" in str(_error(store, gzipped(good)))
    assert "not a tar" in str(_error(store, b"hello world, not a tar" * 100))
    err = _error(store, good[:700])  # cut inside k0.txt's payload
    assert err.member == "k0.txt" and err.offset == 512 and "truncated" in err.reason
    err = _error(store, good[: 512 * 3 + 100])  # cut inside k1.txt's header
    assert err.offset == 512 * 3 and "truncated" in err.reason
    corrupt = bytearray(good)
    corrupt[512 * 3 + 5] ^= 0x55  # name byte of k1.txt's header: checksum mismatch
    err = _error(store, bytes(corrupt))
    assert err.offset == 512 * 3 and "checksum" in err.reason
    non_contiguous = build_tar([("a.txt", b"1"), ("b.txt", b"2"), ("a.json", b"3")])
    err = _error(store, non_contiguous)
    assert err.member == "a.json" and "contiguous" in err.reason and err.offset == 2048
    assert "no samples" in str(_error(store, build_tar([("README", b"x"), ("__meta__/a.b", b"y")])))


def test_stream_source_reads_across_blocks(store, monkeypatch):
    import energon_arrow.tar as tar_pkg

    monkeypatch.setattr(tar_pkg, "WHOLE_READ_LIMIT", 0)  # remote: the sliding-window walk, not a whole read
    monkeypatch.setattr(tar_pkg, "STREAM_WINDOW", 0)  # nor the windowed vectorised one
    data = build_tar([(f"k{i}.bin", bytes(5000 + i)) for i in range(40)], tarfile.GNU_FORMAT)
    store.write_atomic("s.tar", data)
    index = index_shard(store, "s.tar", block_size=4096)
    assert our_view(index) == energon_view(data)


def _record_windowed_walks(monkeypatch, tar_pkg) -> list:
    """The results of the vectorised windowed walk (None: it handed the shard to the general walk)."""
    results = []
    windowed = tar_pkg.scan_windows_fast
    monkeypatch.setattr(tar_pkg, "scan_windows_fast", lambda *a: results.append(windowed(*a)) or results[-1])
    return results


@pytest.mark.parametrize("window_blocks", [1, 2, 3, 16])
def test_remote_shards_larger_than_one_read_use_the_windowed_walk(monkeypatch, window_blocks):
    import uuid

    import energon_arrow.tar as tar_pkg

    store = open_storage(f"memory://ea-win-{uuid.uuid4().hex[:8]}")
    monkeypatch.setattr(tar_pkg, "WHOLE_READ_LIMIT", 0)
    monkeypatch.setattr(tar_pkg, "STREAM_WINDOW", 512 * window_blocks)  # payloads span windows
    results = _record_windowed_walks(monkeypatch, tar_pkg)
    plain = shard_bytes(0, 30, 700)
    inner = build_tar([("x/in0.txt", b"inner"), ("x/in1.txt", b"i" * 700)], tarfile.USTAR_FORMAT)
    nested = build_tar([("a.tar", inner), ("a.txt", b"1"), ("b.bin", inner)], tarfile.USTAR_FORMAT)
    no_eof = plain[: energon_view(plain)[0][-1]]
    long_names = build_tar([(f"{'d' * 120}/k{i}.txt", b"v" * 600) for i in range(4)], tarfile.GNU_FORMAT)
    for name, data, fast in (
        ("p", plain, True),
        ("n", nested, None),
        ("e", no_eof, True),
        ("g", long_names, False),
    ):
        assert our_view(_index(store, data, name)) == energon_view(data), name
        if fast is not None:  # plain shards stay on the vectorised walk; extension headers fall back
            assert (results[-1] is not None) == fast, name
    good = build_tar([("k0.txt", b"a" * 1000), ("k1.txt", b"b" * 10)], tarfile.USTAR_FORMAT)
    err = _error(store, good[:700])  # the general walk reports what the windowed one refuses
    assert err.member == "k0.txt" and err.offset == 512 and "truncated" in err.reason


@pytest.mark.s3
def test_windowed_walk_on_s3(monkeypatch, s3_root):
    import energon_arrow.tar as tar_pkg

    url, options = s3_root
    store = open_storage(url, options)
    monkeypatch.setattr(tar_pkg, "WHOLE_READ_LIMIT", 0)
    monkeypatch.setattr(tar_pkg, "STREAM_WINDOW", 4096)
    results = _record_windowed_walks(monkeypatch, tar_pkg)
    data = shard_bytes(0, 40, 1500)
    assert our_view(_index(store, data)) == energon_view(data)
    assert len(results) == 1 and results[0] is not None  # the windowed walk, not the general one
