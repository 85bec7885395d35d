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


class Upper(ea.FileStoreDecoder):
    def decode(self, fname: str, data: bytes):
        return (fname, data.upper())


def test_energon_file_store_classes(prepared_root, tmp_path):
    (tmp_path / "k1.txt").write_bytes(b"abc")
    system = ea.SystemFileStore(str(tmp_path))
    assert isinstance(system, ea.FileStore) and isinstance(open_file_store(prepared_root), ea.FileStore)
    data, source = system["k1.txt"]
    assert data == b"abc" and source.file_names == ("k1.txt",)
    assert ea.SystemFileStore()[str(tmp_path / "k1.txt")][0] == b"abc"  # no base_dir: absolute paths
    with pytest.raises(LoaderError, match="not an absolute path"):
        ea.SystemFileStore()["k1.txt"]
    primary = ea.PrimaryFileStore(system, current_key="k1")
    sample = {"__key__": "k1"}
    assert primary.get(".txt", sample) == b"abc" and sample["__sources__"][0].file_names == ("k1.txt",)
    assert primary.get_path() == system.get_path()
    decoded = ea.DecodeFileStore(primary, decoder=Upper())
    assert decoded[".txt"][0] == (".txt", b"ABC")  # as energon: the decoder sees the key as passed
    parts = ea.PrimaryFileStore(open_file_store(prepared_root), current_key="000002_000007")
    assert parts[".txt"][0].startswith(b"sample 7 of shard 2")


def test_get_media_metadata_through_the_wrappers(prepared_root, tmp_path):
    from energon_arrow.adapters import open_storage
    from energon_arrow.media import ImageMetadata
    from energon_arrow.testing.media import image_bytes

    (tmp_path / "k1.png").write_bytes(image_bytes("PNG", (5, 3), "L"))
    (tmp_path / "k1.txt").write_bytes(b"abc")
    system = ea.SystemFileStore(str(tmp_path))
    with pytest.raises(
        RuntimeError, match=r"Media metadata database missing at .*index.sqlite\. Run `energon-arrow"
    ):
        system.get_media_metadata("k1.png")
    from energon_arrow.index.media_extract import MediaFilterConfig
    from energon_arrow.index.media_prepare import prepare_media

    assert (
        prepare_media(open_storage(str(tmp_path)), MediaFilterConfig.parse(None, False, True), workers=1) == 1
    )
    system = ea.SystemFileStore(str(tmp_path))
    expected = ImageMetadata(width=5, height=3, format="PNG", mode="L")
    primary = ea.PrimaryFileStore(system, current_key="k1")
    assert system.get_media_metadata("k1.png") == primary.get_media_metadata(".png") == expected
    assert ea.DecodeFileStore(primary, decoder=Upper()).get_media_metadata(".png") == expected
    with pytest.raises(KeyError, match="media metadata missing for 'k1.txt'"):
        primary.get_media_metadata(".txt")
    with pytest.raises(KeyError, match="no file named 'k2.png'"):
        system.get_media_metadata("k2.png")
    with pytest.raises(RuntimeError, match="requires a base directory"):
        ea.SystemFileStore().get_media_metadata(str(tmp_path / "k1.png"))
    # a dataset prepared without the media options
    with pytest.raises(
        RuntimeError, match="Media metadata is not available for the dataset .* --media-metadata-by"
    ):
        open_file_store(prepared_root).get_media_metadata("000002_000007.jpg")
