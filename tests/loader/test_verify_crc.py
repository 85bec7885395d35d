"""`verify="crc"` on local datasets: prepare's CRC32C per part, the loader's check of what it reads, and datasets
without checksums (prepared by energon 7.4.1, or by an energon-arrow that did not record them)."""

from __future__ import annotations

import io
import logging
import os
import shutil
import tarfile

import pyarrow.parquet as pq
import pytest

from energon_arrow.adapters import InvalidStorageOptions
from energon_arrow.loader import BatchDataset, LoaderError, LoaderSettings, open_split
from energon_arrow.loader.verify_crc import ChecksumError
from energon_arrow.samples.decoders import PartDecoder
from energon_arrow.tar.crc import crc32c
from energon_arrow.testing.synthetic import write_webdataset
from tests.query.conftest import make_energon_dataset

ARROW = ".nv-meta/arrow"


def epoch(root: str, verify=None, options=None) -> list:
    """(keys, raw jpg bytes) of every batch of one pass."""
    src = open_split(root, "train", options)
    settings = LoaderSettings(global_batch_size=8, seed=5, repeat=False, verify=verify)
    ds = BatchDataset([src], settings, decoder=PartDecoder(raw=True))
    return [(list(b.__key__), [bytes(x) for x in b.image]) for _, _, b, _, _ in ds]


def _captioning(root: str) -> str:
    from energon_arrow.index.prepare import PrepareOptions, prepare_dataset
    from energon_arrow.meta import field_map_dataset, parse_split_ratio

    options = PrepareOptions(
        split_ratio=parse_split_ratio("1,0,0"),
        dataset_yaml=field_map_dataset("CaptioningSample", {"image": "jpg", "caption": "txt"}),
    )
    prepare_dataset(root, options)
    return root


@pytest.fixture
def ours(tmp_path):
    root = str(tmp_path / "ds")
    write_webdataset(root, shards=3, samples_per_shard=10, image_bytes=700)
    return _captioning(root)


def test_prepare_records_the_crc32c_of_every_member(ours):
    parts = pq.read_table(f"{ours}/{ARROW}/parts.parquet")
    samples = pq.read_table(f"{ours}/{ARROW}/samples.parquet")
    shards = pq.read_table(f"{ours}/{ARROW}/shards.parquet")["path"].to_pylist()
    assert parts.schema.field("content_crc32c").type == "uint32" and parts["content_crc32c"].null_count == 0
    keys = dict(
        zip(
            zip(samples["shard_id"].to_pylist(), samples["sample_index"].to_pylist()),
            samples["sample_key"].to_pylist(),
        )
    )
    recorded = {
        (shards[s], keys[(s, i)] + "." + name): crc
        for s, i, name, crc in zip(
            *(parts[c].to_pylist() for c in ("shard_id", "sample_index", "part_name", "content_crc32c"))
        )
    }
    members = {}
    for path in shards:
        with tarfile.open(os.path.join(ours, path)) as tar:
            for m in tar:
                members[(path, m.name)] = crc32c(tar.extractfile(m).read())
    assert recorded == members and len(members) == 90


def _damage(root: str, shard_id: int = 1, sample: int = 4) -> None:
    """Flip one bit of a jpg payload on disk, keeping the shard's size and mtime (nothing else notices)."""
    parts = pq.read_table(f"{root}/{ARROW}/parts.parquet").to_pylist()
    row = [p for p in parts if p["shard_id"] == shard_id and p["part_name"] == "jpg"][sample]
    path = os.path.join(root, pq.read_table(f"{root}/{ARROW}/shards.parquet")["path"][shard_id].as_py())
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(row["content_offset"] + row["content_size"] // 2)
        byte = f.read(1)[0]
        f.seek(-1, io.SEEK_CUR)
        f.write(bytes([byte ^ 0x10]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_damaged_local_bytes_are_caught_only_with_verify(ours):
    expected = epoch(ours, verify="crc")
    assert epoch(ours) == expected
    _damage(ours)
    assert epoch(ours) != expected  # unverified, the damage reaches the batch
    with pytest.raises(
        ChecksumError,
        match=r"shard-000001\.tar: sample '000001_\d+' part 'jpg': 700 bytes at offset \d+ have CRC32C [0-9a-f]{8}, the side index records [0-9a-f]{8} .*gave up after 1 attempts",
    ):
        epoch(ours, verify="crc", options={"retries": 0})


def test_verify_values_are_checked(ours):
    with pytest.raises(InvalidStorageOptions, match="verify must be one of crc, none, got 'md5'"):
        open_split(ours, "train", {"verify": "md5"})
    with pytest.raises(LoaderError, match="verify must be one of crc, none, got 'yes'"):
        epoch(ours, verify="yes")


def _expect_no_checksums(root: str, monkeypatch, caplog) -> None:
    """A dataset without checksums loads as before; verify="crc" asked for is an error naming it and the fix;
    from the environment variable, a warning."""
    plain = epoch(root)
    hint = rf"{root} split 'train': verify='crc' .* this dataset has no checksums .* `energon-arrow prepare {root}`"
    with pytest.raises(LoaderError, match=hint):
        epoch(root, verify="crc")
    with pytest.raises(LoaderError, match=hint):
        epoch(root, options={"verify": "crc"})
    monkeypatch.setenv("ENERGON_ARROW_VERIFY", "crc")
    with caplog.at_level(logging.WARNING, logger="energon_arrow.loader.verify_crc"):
        assert epoch(root) == plain
    assert "has no checksums" in caplog.text and "reading it unverified" in caplog.text
    monkeypatch.delenv("ENERGON_ARROW_VERIFY")


def test_energon_prepared_dataset_has_no_checksums_until_prepared_again(tmp_path, monkeypatch, caplog):
    root = make_energon_dataset(str(tmp_path / "ds"), split_ratio="1,0,0", image_bytes=300)
    with open(f"{root}/.nv-meta/dataset.yaml", "w") as f:  # the image as raw bytes, as in `ours`
        f.write("sample_type:\n  __module__: megatron.energon\n  __class__: CaptioningSample\n"
                "field_map:\n  image: jpg\n  caption: txt\n")  # fmt: skip
    _expect_no_checksums(root, monkeypatch, caplog)  # converted from index.sqlite (published: null CRCs)
    assert pq.read_table(f"{root}/{ARROW}/parts.parquet")["content_crc32c"].null_count > 0
    plain = epoch(root)
    _captioning(root)  # reads every shard again (the converted rows have no CRCs to reuse)
    assert epoch(root, verify="crc") == plain


def test_side_index_of_an_older_energon_arrow_loads_as_before(ours, monkeypatch, caplog):
    parts = pq.read_table(f"{ours}/{ARROW}/parts.parquet")
    expected = epoch(ours)
    old = parts.drop_columns(["content_crc32c"])  # as written before checksums (same set id metadata)
    pq.write_table(old, f"{ours}/{ARROW}/parts.parquet")
    os.remove(f"{ours}/{ARROW}/manifest.json")  # an older energon-arrow wrote no manifest either
    shutil.rmtree(f"{ours}/{ARROW}/loader")  # the row index is rebuilt from it
    _expect_no_checksums(ours, monkeypatch, caplog)
    assert epoch(ours) == expected
    _captioning(ours)  # prepare again: the shards are read again for their CRCs
    assert pq.read_table(f"{ours}/{ARROW}/parts.parquet")["content_crc32c"].null_count == 0
    assert epoch(ours, verify="crc") == expected
