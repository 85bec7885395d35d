"""Sample bytes damaged on their way from SeaweedFS (the FaultProxy's `corrupt_response`: bits flipped in GET
bodies, which every length check passes) are caught by the loader's `verify="crc"` and read again, so an epoch
returns exactly the fault-free samples; without it the same damage reaches the batches; damage on every read
ends in one error naming the shard, sample, part, offset and both CRCs."""

from __future__ import annotations

import uuid

import pytest

from energon_arrow.testing.s3_faults import epoch, through
from energon_arrow.testing.synthetic import write_webdataset

pytestmark = pytest.mark.s3


@pytest.fixture(scope="module")
def dataset(s3_server):
    """8 shards of 20 samples whose bytes are mostly jpg payload (a flipped bit lands in a part)."""
    from energon_arrow.index.prepare import PrepareOptions, prepare_dataset
    from energon_arrow.meta import field_map_dataset, parse_split_ratio

    bucket = s3_server.create_bucket("ea-verify-crc")
    root = f"s3://{bucket}/{uuid.uuid4().hex[:12]}"
    direct = s3_server.storage_options
    write_webdataset(root, shards=8, samples_per_shard=20, image_bytes=3000, storage_options=direct)
    options = PrepareOptions(
        split_ratio=parse_split_ratio("1,0,0"),
        dataset_yaml=field_map_dataset("CaptioningSample", {"image": "jpg", "caption": "txt"}),
    )
    prepare_dataset(root, options, direct)
    return root


@pytest.mark.parametrize(("seed", "workers"), [(31, 0), (32, 0), (33, 2)])
def test_verify_crc_reads_damaged_ranges_again(proxy, dataset, s3_server, seed, workers):
    expected = epoch(dataset, s3_server.storage_options)
    # 10 attempts per sample: at 30% a sample damaged on 5 reads in a row (the default budget, then a clear
    # ChecksumError) came up in about one CI run of three; on 10, about once in 10^5 samples read again
    got = epoch(dataset, through(proxy, retries=9), proxy, (0.3, seed), verify="crc", workers=workers)
    damaged = proxy.faulted().get("corrupt_response", 0)
    proxy.reset_counts()
    assert damaged > 0
    assert got == expected


def test_without_verify_the_same_damage_reaches_the_batches(proxy, dataset, s3_server):
    expected = epoch(dataset, s3_server.storage_options)
    got = epoch(dataset, through(proxy), proxy, (0.3, 31))
    proxy.reset_counts()
    assert len(got) == len(expected) and got != expected  # same keys, wrong bytes
    assert [k for k, *_ in got] == [k for k, *_ in expected]


def test_damage_on_every_read_is_one_clear_error(proxy, dataset):
    from energon_arrow.loader.verify_crc import ChecksumError

    options = {**through(proxy), "retries": 1, "verify": "crc"}  # the storage option, not the loader argument
    with pytest.raises(ChecksumError) as info:
        epoch(dataset, options, proxy, (1.0, 1))
    proxy.reset_counts()
    message = str(info.value)
    assert message.startswith(f"{dataset}/shards/shard-0000")
    assert "sample '0000" in message and ("part 'jpg'" in message or "part 'txt'" in message)
    assert " at offset " in message and "have CRC32C " in message and "the side index records " in message
    assert "gave up after 2 attempts" in message
