"""msc:// URLs (energon's multi-storage-client scheme) and energon's EPath objects.

Profiles energon-arrow reads natively (S3, POSIX) become s3:// URLs / local paths with equal storage options;
the rest go through multi-storage-client's fsspec filesystem. Both are checked end to end (prepare, query, load)
against a real SeaweedFS server, with the MSC configuration found the way multi-storage-client finds it."""

from __future__ import annotations

import uuid

import pytest

pytest.importorskip("multistorageclient")

import energon_arrow as ea
from energon_arrow.adapters import StorageError, open_storage
from energon_arrow.adapters.msc import resolve_msc_url
from energon_arrow.epathlib import EPath
from energon_arrow.index.prepare import PrepareOptions, prepare_dataset
from energon_arrow.meta import field_map_dataset, parse_split_ratio
from energon_arrow.query import open_dataset
from energon_arrow.testing.synthetic import write_webdataset
from tests.processes import call_within

PREPARE = PrepareOptions(
    split_ratio=parse_split_ratio("1,0,0"),
    dataset_yaml=field_map_dataset("TextSample", {"text": "txt"}),
    num_workers=1,
)


def _write_config(tmp_path, monkeypatch, profiles: str, top: str = "") -> None:
    path = tmp_path / "msc_config.yaml"
    path.write_text(f"{top}profiles:\n{profiles}")
    monkeypatch.setenv("MSC_CONFIG", str(path))


def _s3_profile(name: str, base: str, endpoint: str, key: str, secret: str, extra: str = "") -> str:
    return (
        f"  {name}:\n{extra}    storage_provider:\n      type: s3\n      options:\n"
        f"        base_path: {base}\n        endpoint_url: {endpoint}\n        region_name: us-east-1\n"
        f"        multipart_threshold: 16777216\n    credentials_provider:\n      type: S3Credentials\n"
        f"      options:\n        access_key: {key}\n        secret_key: {secret}\n"
    )


def test_s3_profile_becomes_an_s3_url_with_its_options(tmp_path, monkeypatch):
    profile = _s3_profile("store", "bucket/base", "http://127.0.0.1:1", "AK", "SK")
    profile += "    retry:\n      attempts: 3\n"
    _write_config(tmp_path, monkeypatch, profile)
    url, options = resolve_msc_url("msc://store/data/ds", {"anon": False})
    assert url == "s3://bucket/base/data/ds"
    assert options == {
        "endpoint_url": "http://127.0.0.1:1",
        "client_kwargs": {"region_name": "us-east-1"},
        "key": "AK",
        "secret": "SK",
        "anon": False,
    }
    # the caller's storage options win over the profile's
    assert (
        resolve_msc_url("msc://store/ds", {"endpoint_url": "http://x:2"})[1]["endpoint_url"] == "http://x:2"
    )


def test_env_variables_in_the_config_are_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("EA_TEST_SECRET", "from-env")
    _write_config(tmp_path, monkeypatch, _s3_profile("envp", "b", "http://h:1", "AK", "${EA_TEST_SECRET}"))
    assert resolve_msc_url("msc://envp/x", None)[1]["secret"] == "from-env"


def test_posix_profile_becomes_a_local_path(tmp_path, monkeypatch):
    _write_config(
        tmp_path,
        monkeypatch,
        f"  disk:\n    storage_provider:\n      type: file\n      options:\n        base_path: {tmp_path}\n",
    )
    assert resolve_msc_url("msc://disk/a/b", None) == (f"{tmp_path}/a/b", {})


def test_rclone_urls_are_msc_urls_with_energons_warning(tmp_path, monkeypatch):
    """energon reads its deprecated rclone://profile/... as msc://profile/... and warns (FutureWarning)."""
    _write_config(
        tmp_path,
        monkeypatch,
        f"  disk:\n    storage_provider:\n      type: file\n      options:\n        base_path: {tmp_path}\n",
    )
    with pytest.warns(FutureWarning, match="rclone:// protocol is deprecated. Use msc:// instead."):
        path = EPath("rclone://disk/tmp/path/.././subpath.txt")
    assert str(path) == "msc://disk/tmp/subpath.txt"
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f.txt").write_bytes(b"x")
    with pytest.warns(FutureWarning):
        assert open_storage("rclone://disk/a").read_bytes("f.txt") == b"x"


@pytest.mark.parametrize(
    "extra, options",
    [
        ("    caching_enabled: true\n", ""),  # multi-storage-client's cache applies only through it
        ("", "        rust_client_mode: fast\n"),  # an option energon-arrow does not know
    ],
)
def test_profiles_needing_multi_storage_client_stay_msc(tmp_path, monkeypatch, extra, options):
    profile = _s3_profile("other", "b", "http://h:1", "AK", "SK", extra=extra)
    profile = profile.replace("        multipart_threshold", options + "        multipart_threshold")
    _write_config(tmp_path, monkeypatch, profile)
    assert resolve_msc_url("msc://other/ds", {}) == ("msc://other/ds", {})


def test_an_msc_url_without_profile_is_refused():
    with pytest.raises(StorageError, match="names a profile"):
        open_storage("msc:///data")


def _epoch_texts(path, storage_options=None) -> list[str]:
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
    kw = {"storage_options": storage_options} if storage_options else {}
    ds = ea.get_val_dataset(path, batch_size=4, worker_config=wc, split_part="train", **kw)
    return [t for batch in ea.get_loader(ds) for t in batch.text]


def _msc_dataset(tmp_path, monkeypatch, s3_server, cached: bool) -> tuple[str, str]:
    """A 12-sample WebDataset on SeaweedFS and an MSC profile naming it: (msc:// URL, the same s3:// URL).
    `cached`: the profile turns MSC's cache on, so it is read through multi-storage-client, not natively."""
    bucket = s3_server.create_bucket("ea-tests")
    folder = uuid.uuid4().hex[:10]
    options = s3_server.storage_options
    write_webdataset(
        f"s3://{bucket}/{folder}/ds", shards=2, samples_per_shard=6, image_bytes=8, storage_options=options
    )
    name = f"p{uuid.uuid4().hex[:8]}"
    extra = "    caching_enabled: true\n" if cached else ""
    top = f"cache:\n  size: 200M\n  location: {tmp_path / 'msc-cache'}\n" if cached else ""
    profile = _s3_profile(
        name, bucket, s3_server.endpoint_url, options["key"], options["secret"], extra=extra
    )
    _write_config(tmp_path, monkeypatch, profile, top=top)
    return f"msc://{name}/{folder}/ds", f"s3://{bucket}/{folder}/ds"


@pytest.mark.s3
@pytest.mark.parametrize("cached", [False, True], ids=["native", "through-msc"])
def test_prepare_query_and_load_over_msc(tmp_path, monkeypatch, s3_server, cached):
    """A profile read natively and one read through multi-storage-client (its cache on) give the same
    dataset as the s3:// URL: prepare writes it, DuckDB queries it, the loader yields the same samples, and an
    energon EPath object is accepted where energon accepts one."""
    epathlib = pytest.importorskip("megatron.energon.epathlib")
    url, s3_url = _msc_dataset(tmp_path, monkeypatch, s3_server, cached)
    assert open_storage(url).protocol == ("msc" if cached else "s3")

    prepare_dataset(url, PREPARE, {})
    with open_dataset(url) as ds:
        assert ds.sql("SELECT count(*) AS n FROM samples").arrow().column("n").to_pylist() == [12]
    texts = _epoch_texts(epathlib.EPath(url))
    assert len(texts) == 12 and len(set(texts)) == 12
    assert texts == _epoch_texts(s3_url, s3_server.storage_options) == _epoch_texts(url)
    # our EPath opens a shard for reading, seekable, as energon's does (MSC's open takes no block size)
    shard = open_storage(s3_url, s3_server.storage_options).read_bytes("shards/shard-000000.tar")
    with EPath(f"{url}/shards/shard-000000.tar").open("rb") as f:
        assert f.read(1000) == shard[:1000]
        f.seek(512)
        assert f.read() == shard[512:]


@pytest.mark.s3
def test_workers_read_through_msc_after_the_parent_did(tmp_path, monkeypatch, s3_server):
    """multi-storage-client runs its fsspec calls on one module-level thread pool: a DataLoader worker forked after
    the training process used it inherited the pool without its threads and waited forever on its first read.
    Each worker now gets a new pool (adapters/after_fork.py)."""
    url, s3_url = _msc_dataset(tmp_path, monkeypatch, s3_server, cached=True)
    prepare_dataset(url, PREPARE, {})  # the parent's pool now has threads
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=2)
    ds = ea.get_val_dataset(url, batch_size=4, worker_config=wc, split_part="train")
    texts = call_within(
        lambda: [t for batch in ea.get_loader(ds) for t in batch.text], 60, "a 2-worker epoch through msc://"
    )
    assert sorted(texts) == sorted(_epoch_texts(s3_url, s3_server.storage_options))
