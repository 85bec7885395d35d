"""Random access by name (energon's FileStore interface) and loading from S3."""

from __future__ import annotations

import pytest

import energon_arrow as ea
from energon_arrow.loader.errors import LoaderError
from energon_arrow.loader.filestore import FolderStore, PartStore, open_file_store
from energon_arrow.samples import PartDecoder
from energon_arrow.testing.synthetic import write_webdataset
from tests.loader.conftest import PER_SHARD, SHARDS, prepare


def test_part_and_sample_by_key(prepared_root):
    store = open_file_store(prepared_root)
    assert isinstance(store, PartStore) and len(store) == 4 * 40 * 3
    data, source = store["000002_000007.txt"]
    assert data.startswith(b"sample 7 of shard 2")
    assert source.shard_name == "shards/shard-000002.tar" and source.file_names == ("000002_000007.txt",)
    whole, _ = store["000002_000007"]
    assert sorted(whole) == ["jpg", "json", "txt"] and whole["txt"] == data
    sample = ea.TextSample(__key__="x", __restore_key__=(), text="")
    assert store.get("000001_000001.json", sample).startswith(b"{")
    assert sample.__sources__[0].file_names == ("000001_000001.json",)
    decoded = PartStore(prepared_root, decoder=PartDecoder())
    assert decoded["000001_000001.json"][0]["label"] == 1
    with pytest.raises(LoaderError, match="no part or sample named 'nope.txt'"):
        store["nope.txt"]


def test_folder_store(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "b.txt").write_bytes(b"hello")
    store = open_file_store(str(tmp_path))
    assert isinstance(store, FolderStore) and store["a/b.txt"][0] == b"hello"
    assert open_file_store(f"filesystem://{tmp_path}")["a/b.txt"][0] == b"hello"
    with pytest.raises(LoaderError, match="auxiliary file not found"):
        store["missing.txt"]


class RawTE(ea.DefaultTaskEncoder):
    decoder = None


@pytest.mark.s3
def test_load_from_s3(prepared_root, s3_root):
    url, options = s3_root
    write_webdataset(
        url, shards=SHARDS, samples_per_shard=PER_SHARD, image_bytes=200, storage_options=options
    )
    prepare(url, options)  # energon-arrow prepare straight on S3
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=1)
    val = ea.get_val_dataset(
        url, worker_config=wc, batch_size=8, task_encoder=RawTE(), storage_options=options
    )
    keys = [k for b in ea.get_loader(val) for k in b.__key__]
    assert keys == [f"000003_{i:06d}" for i in range(40)]
    local = ea.get_val_dataset(prepared_root, worker_config=wc, batch_size=8, task_encoder=RawTE())
    assert [b.image for b in ea.get_loader(val)] == [b.image for b in ea.get_loader(local)]
    store = PartStore(url, options)
    assert store["000003_000005.txt"][0].startswith(b"sample 5 of shard 3")
