"""`join:` metadatasets in the loader: nonmatch rules, joiner callables by name, subset of the joined rows."""

from __future__ import annotations

import pytest

import energon_arrow as ea
from energon_arrow.loader.errors import LoaderError
from energon_arrow.testing.synthetic import write_webdataset
from tests.loader.conftest import prepare


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    base = tmp_path_factory.mktemp("join")
    primary, other = str(base / "p"), str(base / "o")
    write_webdataset(primary, shards=3, samples_per_shard=6, image_bytes=20)
    write_webdataset(other, shards=2, samples_per_shard=6, image_bytes=30, seed=3)
    prepare(primary, split_ratio="1,0,0")
    prepare(other, split_ratio="1,0,0")
    return primary, other


def join_pair(primary, other):
    """A joiner callable taking the samples by name."""
    return ea.TextSample(
        __key__=primary.__key__,
        __restore_key__=primary.__restore_key__,
        text="-" if other is None else other.__key__,
    )


class RawTE(ea.DefaultTaskEncoder):
    decoder = None

    def batch(self, samples):
        return samples


def _val(path):
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = ea.get_val_dataset(path, split_part="train", worker_config=wc, batch_size=4, task_encoder=RawTE())
    return [s for b in ea.get_loader(ds) for s in b]


def _mds(tmp_path, roots, nonmatch, joiner, subset="", mapping=True, prepared=True):
    primary, other = roots
    if mapping:
        join = f"      primary: {{path: {primary}}}\n      other: {{path: {other}, nonmatch: {nonmatch}}}\n"
    else:
        join = f"      - {{path: {primary}}}\n      - {{path: {other}, nonmatch: {nonmatch}}}\n"
    path = tmp_path / "j.yaml"
    path.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n"
        f"{subset}    join:\n{join}    joiner: {joiner}\n"
    )
    if prepared:
        ea.prepare_metadataset(str(path))
    return str(path)


def test_nonmatch_none_passes_none_by_name(tmp_path, roots):
    joiner = "{__module__: tests.energon.test_metadataset_join, __class__: join_pair}"
    out = _val(_mds(tmp_path, roots, "none", joiner))
    assert len(out) == 18
    assert all(o.text == o.__key__ for o in out[:12]) and all(o.text == "-" for o in out[12:])


def test_a_function_joiner_as_energon_spells_it(tmp_path, roots):
    """energon's `joiner: {__module__, __function__}` names a callable (`__class__` a sample type)."""
    joiner = "{__module__: tests.energon.test_metadataset_join, __function__: join_pair}"
    out = _val(_mds(tmp_path, roots, "skip", joiner))
    assert len(out) == 12 and all(o.text == o.__key__ for o in out)
    with pytest.raises(LoaderError, match=r"__function__.* needs its '__module__'"):
        _val(_mds(tmp_path, roots, "skip", "{__function__: join_pair}", prepared=False))


def test_a_join_loads_only_once_prepared_for_its_datasets(tmp_path, roots):
    """As in energon: no join index (never prepared, or the join changed since) is an error naming the fix."""
    joiner = "{__module__: tests.energon.test_metadataset_join, __function__: join_pair}"
    with pytest.raises(LoaderError, match=r"has no join index .*run prepare_metadataset"):
        _val(_mds(tmp_path, roots, "skip", joiner, prepared=False))
    _mds(tmp_path, roots, "skip", joiner)
    with pytest.raises(LoaderError, match=r"has no join index"):  # nonmatch changed: another join index
        _val(_mds(tmp_path, roots, "none", joiner, prepared=False))
    assert len(_val(_mds(tmp_path, roots, "none", joiner))) == 18


def test_nonmatch_skip_with_subset_and_sample_type(tmp_path, roots):
    joiner = "{__module__: megatron.energon, __class__: CaptioningSample}"
    out = _val(_mds(tmp_path, roots, "skip", joiner, '    subset: {range: ["50%", "100%"]}\n', mapping=False))
    assert [s.__key__ for s in out] == [f"{i // 6:06d}_{i % 6:06d}" for i in range(6, 12)]
    assert all(type(s).__name__ == "CaptioningSample" and len(s.__sources__) == 3 for s in out)


def test_nonmatch_error_names_the_key(tmp_path, roots):
    joiner = "{__module__: megatron.energon, __class__: CaptioningSample}"
    with pytest.raises(LoaderError, match=r"sample key '000002_000000' .* nonmatch is 'error'"):
        _val(_mds(tmp_path, roots, "error", joiner, mapping=False, prepared=False))


def picky_join(primary, other):
    """A joiner that fails for one key."""
    if primary.__key__ == "000001_000002":
        raise ValueError("cannot join this one")
    return join_pair(primary, other)


def test_a_joiner_that_raises_follows_the_error_policy(tmp_path, roots):
    """As in energon (the joiner runs in load_sample): the error handler gets it and the sample is skipped; with
    skip_errors=False a JoinerError names shard, key and joiner."""
    from energon_arrow.loader.errors import JoinerError

    path = _mds(
        tmp_path, roots, "none", "{__module__: tests.energon.test_metadataset_join, __class__: picky_join}"
    )
    seen = []
    wc = ea.WorkerConfig(
        rank=0, world_size=1, num_workers=0, global_error_handler=lambda e, s, src=None: seen.append(e)
    )
    ds = ea.get_val_dataset(path, split_part="train", worker_config=wc, batch_size=4, task_encoder=RawTE())
    keys = [s.__key__ for b in ea.get_loader(ds) for s in b]
    assert len(keys) == 17 and "000001_000002" not in keys
    assert [type(e).__name__ for e in seen] == ["JoinerError"] and "picky_join failed" in str(seen[0])
    ds = ea.get_val_dataset(
        path, split_part="train", worker_config=wc, batch_size=4, task_encoder=RawTE(), skip_errors=False
    )
    with pytest.raises(
        JoinerError, match=r"sample '000001_000002': the joiner picky_join failed: ValueError"
    ):
        list(ea.get_loader(ds))


def test_load_dataset_gives_a_joined_factory_with_joined_samples(tmp_path, roots):
    joiner = "{__module__: tests.energon.test_metadataset_join, __class__: join_pair}"
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
    loaded = ea.load_dataset(_mds(tmp_path, roots, "none", joiner)).get_datasets(
        training=False, split_part="train", worker_config=wc, decoder=None
    )
    (factory,) = [d.dataset for d in loaded.datasets]
    assert type(factory) is ea.JoinedWebdatasetFactory and isinstance(factory, ea.BaseCoreDatasetFactory)
    out = list(ea.get_loader(factory.build()))
    assert len(out) == 18 and out[0].text == out[0].__key__ and out[-1].text == "-"


@pytest.mark.s3
def test_members_on_s3_are_read_per_batch_not_per_sample(tmp_path, roots, s3_server):
    """A joined dataset on S3 gives the same samples as on disk, and its member's samples of a batch are read
    with a few coalesced GETs per batch instead of one GET per sample."""
    import uuid

    from energon_arrow.testing.faultproxy import FaultProxy
    from energon_arrow.testing.seaweedfs import ACCESS_KEY, SECRET_KEY

    base = f"s3://{s3_server.create_bucket('ea-tests')}/{uuid.uuid4().hex[:12]}"
    options = s3_server.storage_options
    remote = (f"{base}/p", f"{base}/o")
    for url, shards, size, seed in ((remote[0], 3, 20, 0), (remote[1], 2, 30, 3)):
        write_webdataset(
            url, shards=shards, samples_per_shard=6, image_bytes=size, seed=seed, storage_options=options
        )
        prepare(url, options, split_ratio="1,0,0")
    joiner = "{__module__: tests.energon.test_metadataset_join, __class__: join_pair}"
    local = _val(_mds(tmp_path, roots, "none", joiner))
    (tmp_path / "s3").mkdir()
    with open(_mds(tmp_path / "s3", remote, "none", joiner, prepared=False)) as f:
        text = f.read()
    bucket, prefix = base[len("s3://") :].split("/", 1)
    s3_server.client().put_object(Bucket=bucket, Key=f"{prefix}/j.yaml", Body=text.encode())
    path = f"{base}/j.yaml"
    ea.prepare_metadataset(path, storage_options=options)
    with FaultProxy(s3_server.endpoint_url) as proxy:
        opts = {"endpoint_url": proxy.endpoint_url, "key": ACCESS_KEY, "secret": SECRET_KEY}
        wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
        ds = ea.get_val_dataset(
            path,
            split_part="train",
            worker_config=wc,
            batch_size=4,
            task_encoder=RawTE(),
            storage_options=opts,
        )
        proxy.reset_counts()
        got = [s for b in ea.get_loader(ds) for s in b]
        member_gets = [
            r for r in proxy.requests if r[0] == "GET" and f"{remote[1].split('/', 3)[3]}/" in r[1]
        ]
    assert [(s.__key__, s.text) for s in got] == [(s.__key__, s.text) for s in local]
    # 12 of the 18 samples have a member sample (3 batches hold them): at most one GET per member shard and batch
    assert 0 < len(member_gets) <= 2 * 3


def test_a_join_index_named_in_another_process_is_found_by_content(tmp_path, roots):
    """energon names a join index by hashing a set of sample excludes in iteration order, which differs between
    processes once a member has two: then an index file of another name with the same content counts."""
    import os

    import yaml

    primary, other = roots
    meta = os.path.join(primary, ".nv-meta")
    with open(os.path.join(meta, "split.yaml")) as f:
        split = yaml.safe_load(f)
    shard = split["split_parts"]["train"][0]
    split["exclude"] = [f"{shard}/000000_000001", f"{shard}/000000_000003"]
    with open(os.path.join(meta, "two_excludes.yaml"), "w") as f:
        yaml.safe_dump(split, f)
    path = tmp_path / "j.yaml"
    path.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    join:\n"
        f"      - {{path: {primary}, split_config: two_excludes.yaml}}\n      - {{path: {other}, nonmatch: none}}\n"
        "    joiner: {__module__: tests.energon.test_metadataset_join, __function__: join_pair}\n"
    )
    (written,) = ea.prepare_metadataset(str(path))
    moved = os.path.join(os.path.dirname(written), "join_index_" + "0" * 64 + ".bin")
    os.rename(written, moved)
    assert len(_val(str(path))) == 16
    with open(moved, "r+b") as f:  # another join's index of the same size
        f.seek(-1, os.SEEK_END)
        f.write(b"\x7f")
    with pytest.raises(LoaderError, match=r"has no join index"):
        _val(str(path))
