"""Opening a split costs O(shards): the loader reads a memory-mapped row index, not the per-sample side index.

Structural checks, no timings: the split's rows and batch order equal the query layer's effective table (the
previous implementation: the whole table loaded and sorted in memory); a 1M-sample index-only dataset opens with
its Parquet sample and part pages destroyed (so nothing per-sample is read but the map) and with a memory peak far
below a byte per sample; the row index follows a re-prepared side index.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tracemalloc

import numpy as np
import pyarrow as pa
import pytest
import yaml

from energon_arrow.adapters import open_storage
from energon_arrow.loader.dataset import BatchDataset, LoaderSettings
from energon_arrow.loader.order import BlockLayout, epoch_order
from energon_arrow.loader.row_index import LOCAL_REL
from energon_arrow.loader.schedule import BatchSchedule
from energon_arrow.loader.source import SplitSource, map_index, open_split
from energon_arrow.loader.split_rows import RowMap
from energon_arrow.meta import read_dataset_yaml
from energon_arrow.query import open_dataset
from energon_arrow.samples.decoders import PartDecoder
from energon_arrow.testing.scale_dataset import write_scale_dataset
from tests.loader.conftest import prepare

SPLIT = {
    "split_parts": {
        "train": [f"shards/shard-{s:06d}.tar" for s in (2, 0, 1, 3)],
        "val": ["shards/shard-000003.tar", "shards/shard-000001.tar"],
    },
    # shard 3 out of both splits; samples cut at a shard's start, middle and end, and a key no shard has
    "exclude": [
        "shards/shard-000003.tar",
        "shards/shard-000000.tar/000000_000000",
        "shards/shard-000000.tar/000000_000017",
        "shards/shard-000000.tar/000000_000018",
        "shards/shard-000001.tar/000001_000039",
        "shards/shard-000002.tar/no_such_key",
    ],
}


def _write_split(root: str, split: dict) -> None:
    with open(os.path.join(root, ".nv-meta", "split.yaml"), "w") as f:
        yaml.safe_dump(split, f)


def _query_source(root: str, split: str) -> SplitSource:
    """The effective table as the loader held it before the row index: the whole query result in memory."""
    storage = open_storage(root)
    with open_dataset(storage) as ds:
        return map_index(SplitSource.from_table(storage, ds.split(split), read_dataset_yaml(storage)))


def _columns(src: SplitSource) -> dict:
    paths = np.asarray(src.shard_paths, dtype=object)
    return {
        "shard": paths[np.asarray(src.shard_id)].tolist(),
        "sample_index": np.asarray(src.sample_index).tolist(),
        "byte_offset": np.asarray(src.byte_offset).tolist(),
        "byte_size": np.asarray(src.byte_size).tolist(),
        "key": src.keys.to_pylist(),
    }


def _keys_of_batches(sources, batches: int, **settings) -> list[list[str]]:
    ds = BatchDataset(
        sources,
        LoaderSettings(global_batch_size=8, seed=3, **settings),
        weights=[2.0, 1.0] if len(sources) == 2 else None,
        decoder=PartDecoder(raw=True),
    )
    caches = ds._caches()
    out = []
    for b in range(batches):
        owner, rows = ds.plan(b, caches)
        out.append([sources[d].keys[int(r)].as_py() for d, r in zip(owner.tolist(), rows.tolist())])
    return out


def test_split_rows_and_order_equal_the_query_table(dataset_copy):
    _write_split(dataset_copy, SPLIT)
    for split in ("train", "val"):
        new, old = open_split(dataset_copy, split), _query_source(dataset_copy, split)
        assert _columns(new) == _columns(old)
        assert len(new.rowmap.first) <= 6  # runs: one per shard, plus one per excluded sample
        assert np.array_equal(new.shard_runs()[0], old.shard_runs()[0])
        sub_new, sub_old = new.subset(5, 30), old.subset(5, 30)
        assert _columns(sub_new) == _columns(sub_old)
    train_new, train_old = open_split(dataset_copy, "train"), _query_source(dataset_copy, "train")
    val_new, val_old = open_split(dataset_copy, "val"), _query_source(dataset_copy, "val")
    for settings in (
        {"block_size": 4},
        {"block_size": 16, "shuffle_buffer": 10},
        {"block_size": 3, "shuffle_over_epochs": 2},
        {"block_size": 5, "shuffle_over_epochs": -1},
        {"shuffle": False},
    ):
        # 40 batches of 8 cross several epochs of both splits
        assert _keys_of_batches([train_new], 40, **settings) == _keys_of_batches([train_old], 40, **settings)
        assert _keys_of_batches([train_new, val_new], 20, **settings) == _keys_of_batches(
            [train_old, val_old], 20, **settings
        )


def test_block_layout_from_runs_equals_layout_of_the_column():
    rng = np.random.default_rng(0)
    shard_ids = np.repeat(rng.integers(0, 5, 60), rng.integers(1, 30, 60))
    cuts = np.flatnonzero(np.r_[True, shard_ids[1:] != shard_ids[:-1]])
    for block in (1, 4, 16, 1000):
        a = BlockLayout(shard_ids, block)
        b = BlockLayout.from_runs(cuts, np.diff(np.r_[cuts, len(shard_ids)]), block)
        assert a.n == b.n and np.array_equal(a.starts, b.starts) and np.array_equal(a.sizes, b.sizes)


def test_row_map_slices_and_maps_rows():
    rm = RowMap(
        np.array([0, 3, 3, 7, 12]), np.array([100, 50, 10, 60]), np.array([4, 2, 2, 2])
    )  # adjacent runs of shard 2 merge
    rows = np.r_[100:103, 10:14, 60:65]
    assert np.array_equal(rm.dataset_rows(np.arange(12))[0], rows)
    sub = rm.slice(2, 9)
    assert np.array_equal(sub.dataset_rows(np.arange(7))[0], rows[2:9])
    assert [a.tolist() for a in rm.shard_runs()] == [[0, 3], [3, 9]]
    with pytest.raises(IndexError, match="out of bounds"):
        rm.dataset_rows(np.array([12]))


def _destroy_data_pages(path: str) -> None:
    """Overwrite a Parquet file's data pages with zeros, keeping its footer, size and mtime: its schema still
    reads (and the side index's identity is unchanged), any read of its rows fails."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(-8, os.SEEK_END)
        footer = int.from_bytes(f.read(4), "little")
        f.seek(4)
        f.write(b"\0" * (st.st_size - 8 - footer - 4))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


class FileCalls:
    """Counts the `os` calls that name a path under `root` (stat / lstat of files, scandir / listdir / walk of
    folders) while installed with monkeypatch; `os.fstat` of open descriptors separately."""

    def __init__(self, root: str, monkeypatch):
        self.root = os.path.realpath(root) + os.sep
        self.stats: list[str] = []
        self.listings: list[str] = []
        self.fstats = 0
        for name, calls in (("stat", self.stats), ("lstat", self.stats)):
            monkeypatch.setattr(os, name, self._wrap(getattr(os, name), calls))
        for name in ("scandir", "listdir", "walk"):
            monkeypatch.setattr(os, name, self._wrap(getattr(os, name), self.listings))
        real_fstat = os.fstat

        def fstat(fd, *a, **kw):
            self.fstats += 1
            return real_fstat(fd, *a, **kw)

        monkeypatch.setattr(os, "fstat", fstat)

    def _wrap(self, real, calls: list[str]):
        def call(path=".", *a, **kw):
            if isinstance(path, (str, os.PathLike)) and os.path.abspath(path).startswith(self.root):
                calls.append(os.path.abspath(path)[len(self.root) :])
            return real(path, *a, **kw)

        return call


def test_million_sample_split_opens_from_the_map_alone(tmp_path, monkeypatch):
    root = write_scale_dataset(str(tmp_path / "big"), shards=250, per_shard=4000, image_bytes=16)
    n = 1_000_000
    first = open_split(root, "train")  # builds the row index once (prepare writes it for its datasets)
    assert len(first) == n and os.path.isfile(os.path.join(root, LOCAL_REL, "manifest.json"))
    for name in ("samples", "parts"):
        _destroy_data_pages(os.path.join(root, ".nv-meta", "arrow", f"{name}.parquet"))
    del first
    arrow_before = pa.total_allocated_bytes()
    with monkeypatch.context() as m:
        calls = FileCalls(root, m)
        tracemalloc.start()
        try:
            src = open_split(root, "train")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 2 * n  # well under the 16 bytes per sample target: the per-shard state only
    assert pa.total_allocated_bytes() - arrow_before < 2 * n
    # O(folders) system calls: the one shard folder listed once, no shard stat'ed (checked at first read)
    assert calls.listings == ["shards"]
    assert not [p for p in calls.stats if p.startswith("shards")] and calls.fstats == 0
    assert len(src) == n and len(src.rowmap.first) == 250
    assert isinstance(src.byte_offset.table, np.memmap)
    ds = BatchDataset([src], LoaderSettings(global_batch_size=16, seed=1), decoder=PartDecoder(raw=True))
    (_, _, batch, _, _) = next(iter(ds))
    assert len(batch.__key__) == 16 and all(len(bytes(j)) == 16 for j in batch.image)
    assert 1 <= int(src.shard_check._checked.sum()) <= 16  # the shards of the batch, checked once each


def test_changed_local_shards_are_named_at_open_or_first_read(dataset_copy):
    """Missing shards fail the open (the folder listing); a changed size fails the first read of that shard."""
    src = open_split(dataset_copy, "train")
    sid = int(np.asarray(src.shard_id)[0])
    path = os.path.join(dataset_copy, src.shard_paths[sid])
    with open(path, "ab") as f:
        f.write(b"\0" * 512)
    from energon_arrow.loader.errors import StaleIndexError
    from energon_arrow.loader.reader import SampleReader
    from energon_arrow.query import StaleIndexError as QueryStaleIndexError

    src = open_split(dataset_copy, "train")  # no stat at open
    with pytest.raises(
        StaleIndexError, match=rf"{src.shard_paths[sid]}: shard changed since it was indexed \(size"
    ):
        SampleReader(src).read(np.array([0]))
    os.remove(path)
    with pytest.raises(
        QueryStaleIndexError, match=rf"{src.shard_paths[sid]}: shard is in the index but missing"
    ):
        open_split(dataset_copy, "train")
    assert len(open_split(dataset_copy, "train", verify=False)) == len(src)


def test_changed_shard_is_named_by_a_dataloader_worker(dataset_copy):
    """The check at first read runs in the DataLoader worker that reads the shard; its error reaches the
    training process naming the shard."""
    import energon_arrow as ea
    from tests.loader.conftest import first_batch

    class Raw(ea.DefaultTaskEncoder):
        decoder = None

    for name in os.listdir(os.path.join(dataset_copy, "shards")):
        with open(os.path.join(dataset_copy, "shards", name), "ab") as f:
            f.write(b"\0" * 512)  # every shard: whichever the first batch reads
    with pytest.raises(Exception, match=r"shard-00000\d\.tar: shard changed since it was indexed \(size"):
        first_batch(dataset_copy, te=Raw(), workers=2)


def test_copy_without_fingerprints_warns_once_per_process(dataset_copy, tmp_path, caplog):
    """New mtimes, old sizes, no fingerprints to check: accepted, one warning per process (not per shard)."""
    import logging

    from energon_arrow.loader.reader import SampleReader
    from tests.query.test_copied_dataset import _drop_fingerprints, cp_r

    copy = cp_r(dataset_copy, str(tmp_path / "moved"))
    _drop_fingerprints(copy)
    src = open_split(copy, "train")
    with caplog.at_level(logging.WARNING, logger="energon_arrow.query.sideindex"):
        reader = SampleReader(src)
        for first in np.asarray(src.shard_runs()[0]):
            assert len(reader.read(np.array([first]))) == 1  # one row of each shard of the split
    assert int(src.shard_check._checked.sum()) == 3
    assert caplog.text.count("have new modification times but their old size") == 1


def test_split_naming_an_unknown_shard_is_refused(dataset_copy):
    from energon_arrow.meta.errors import MetaError

    _write_split(
        dataset_copy, {"split_parts": {"train": ["shards/shard-000000.tar"], "val": ["shards/nope.tar"]}}
    )
    with pytest.raises(MetaError, match=r"split 'val' names shard 'shards/nope.tar', which is not in"):
        open_split(dataset_copy, "train")


@pytest.mark.heavy
def test_row_index_follows_a_new_side_index(dataset_copy):
    src = open_split(dataset_copy, "train")
    manifest = os.path.join(dataset_copy, LOCAL_REL, "manifest.json")
    with open(manifest) as f:
        before = json.load(f)["source"]
    keys = src.keys.to_pylist()
    prepare(dataset_copy, split_ratio="1,1,0")  # new side index, new split
    with open(manifest) as f:
        assert json.load(f)["source"] != before  # prepare wrote a fresh row index
    again = open_split(dataset_copy, "train")
    assert _columns(again) == _columns(_query_source(dataset_copy, "train"))
    assert again.keys.to_pylist() != keys


# sha256 (first 16 hex digits) of three epochs' rows, recorded with the implementation before the row index
# (main at 36985fc): the order is a pure function of the settings and must not change
GOLDEN_ORDERS = {
    "block4": ({"block_size": 4}, "b8cb5feba57a42c7"),
    "block16_buffer10": ({"block_size": 16, "shuffle_buffer": 10}, "015a9c35a267c463"),
    "block3_over2": ({"block_size": 3, "over_epochs": 2}, "b6561363f0961435"),
    "block5_over-1": ({"block_size": 5, "over_epochs": -1}, "f0e56f41481c0b15"),
    "block7_over3_buffer5": ({"block_size": 7, "over_epochs": 3, "shuffle_buffer": 5}, "3325814355193d8c"),
    "noshuffle_buffer": ({"shuffle": False, "shuffle_buffer": 8}, "8b8c713d8a387a2a"),
}


@pytest.mark.parametrize("name", sorted(GOLDEN_ORDERS))
def test_epoch_order_is_unchanged(name):
    kw, digest = GOLDEN_ORDERS[name]
    shard_ids = np.repeat(np.arange(7), [5, 40, 17, 1, 33, 64, 9])
    rows = np.concatenate([epoch_order(shard_ids, 11, e, **kw) for e in range(3)]).astype(np.int64)
    assert hashlib.sha256(rows.tobytes()).hexdigest()[:16] == digest


def test_blend_schedule_is_unchanged():
    s = BatchSchedule([100, 50, 7], 8, 3, [2.0, 1.0, 0.5])
    slots = np.concatenate([np.concatenate(s.slots(b, 0, 8)) for b in range(30)]).astype(np.int64)
    assert hashlib.sha256(slots.tobytes()).hexdigest()[:16] == "5a76b34c6ec9aaaa"


def test_dataset_prepared_by_energon_gets_its_row_index_once(energon_prepared_root, tmp_path):
    root = str(tmp_path / "ds")
    shutil.copytree(energon_prepared_root, root)
    first = open_split(root, "train")  # converts index.sqlite, publishes the side index, builds the row index
    manifest = os.path.join(root, LOCAL_REL, "manifest.json")
    stamp = os.stat(manifest).st_mtime_ns
    again = open_split(root, "train")
    assert os.stat(manifest).st_mtime_ns == stamp  # reused, not rebuilt
    assert _columns(first) == _columns(again) == _columns(_query_source(root, "train"))


def test_a_read_only_open_writes_nothing_to_the_dataset(energon_prepared_root, tmp_path):
    """`publish=False` (lint): the conversion of index.sqlite stays in memory, nothing is written into the dataset."""
    root = str(tmp_path / "ds")
    # as energon left it: without what other tests' opens of the shared fixture published there
    shutil.copytree(energon_prepared_root, root, ignore=shutil.ignore_patterns("arrow"))
    src = open_split(root, "train", publish=False)
    assert not os.path.exists(os.path.join(root, LOCAL_REL))
    assert not os.path.exists(os.path.join(root, ".nv-meta", "arrow"))
    assert _columns(src) == _columns(_query_source(root, "train"))


def test_shard_listing_is_one_listdir_per_folder(tmp_path, monkeypatch):
    from energon_arrow.loader.shard_check import check_listed
    from energon_arrow.query import StaleIndexError

    paths = ["a.tar", "x/b.tar", "x/c.tar", "x/y/d.tar", "z/e.tar"]
    for p in paths[:-1]:
        (tmp_path / p).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / p).write_bytes(b"")
    storage = open_storage(str(tmp_path))
    with pytest.raises(StaleIndexError, match=r"z/e\.tar: shard is in the index but missing on storage"):
        check_listed(storage, paths)  # its folder does not exist
    (tmp_path / "z").mkdir()
    (tmp_path / "z" / "e.tar").write_bytes(b"")
    (tmp_path / "x" / "d.tar").write_bytes(b"")  # same name in another folder: not x/y/d.tar
    os.remove(tmp_path / "x" / "y" / "d.tar")
    with pytest.raises(StaleIndexError, match=r"x/y/d\.tar: shard is in the index but missing"):
        check_listed(storage, paths)
    (tmp_path / "x" / "y" / "d.tar").write_bytes(b"")
    with monkeypatch.context() as m:
        calls = FileCalls(str(tmp_path), m)
        check_listed(storage, paths)
    # one listdir per folder (the root, "a.tar"'s folder, is not under FileCalls' prefix), no stat
    assert sorted(calls.listings) == ["x", "x/y", "z"] and calls.stats == []
