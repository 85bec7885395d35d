"""Bad input: stale index, undecodable parts (skip + budget), unknown sample type, missing parts, failing workers."""

from __future__ import annotations

import os

import pytest

import energon_arrow as ea
from energon_arrow.loader.errors import DecodeError, ErrorBudgetExceeded, LoaderError, MissingPartError
from tests.loader.conftest import first_batch, write_dataset_yaml

WC = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)


def test_undecodable_part_names_shard_key_part(prepared_root):
    # the synthetic jpg parts are random bytes: Pillow cannot decode them
    with pytest.raises(DecodeError, match=r"shards/shard-00000\d\.tar: sample '\d+_\d+': part 'jpg'"):
        first_batch(prepared_root, skip_errors=False)


def test_samples_that_do_not_load_go_to_the_error_handler_as_in_energon(prepared_root):
    """By default (energon's MapDataset over load_sample) a sample that does not decode goes to the worker config's
    global_error_handler and is skipped; 100 failures in a row are fatal (the dataset is broken)."""
    from energon_arrow.loader.errors import FatalSampleError

    seen = []

    def handler(exc, sample, sources=None):
        seen.append((type(exc).__name__, sample["__key__"], sample["__shard__"]))

    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0, global_error_handler=handler)
    ds = ea.get_train_dataset(prepared_root, worker_config=wc, batch_size=4, task_encoder=_picky_decoder())
    loader = ea.get_loader(ds)
    it = iter(loader)
    keys = [k for _ in range(30) for k in next(it).__key__]  # one epoch of 120 samples, one bad per shard
    it.close()
    assert len(keys) == 117 and loader.skipped == 3
    assert sorted(k for _, k, _ in seen) == sorted({k for _, k, _ in seen}) and len(seen) == 3
    assert {name for name, _, _ in seen} == {"DecodeError"} and all(s.startswith("shards/") for *_, s in seen)
    # every sample fails (random bytes as JPEG): fatal after 100 in a row, the handler saw each
    seen.clear()
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0, global_error_handler=handler)
    with pytest.raises(FatalSampleError, match="load_sample failed 100 times in a row"):
        for _ in ea.get_loader(ea.get_train_dataset(prepared_root, worker_config=wc, batch_size=4)):
            pass
    assert len(seen) == 100


def _picky_decoder():
    def txt(data):
        text = str(data, "utf-8")
        if text.startswith("sample 1 "):
            raise ValueError("bad caption")
        return text

    te = ea.DefaultTaskEncoder()
    te.decoder = ea.PartDecoder(handlers={"jpg": bytes, "txt": txt})
    return te


def test_skip_errors_counts_and_budget(prepared_root):
    # one sample per shard fails (index 1); 3 train shards
    def dataset(budget):
        return ea.get_train_dataset(
            prepared_root,
            worker_config=WC,
            batch_size=4,
            task_encoder=_picky_decoder(),
            skip_errors=True,
            error_budget=budget,
        )

    with pytest.raises(ErrorBudgetExceeded, match="2 samples skipped, over the error budget of 1"):
        for _ in ea.get_loader(dataset(1)):
            pass
    ds = dataset(3)
    loader = ea.get_loader(ds)
    it = iter(loader)
    keys = [k for _ in range(30) for k in next(it).__key__]  # one epoch of 120 samples
    it.close()
    assert len(keys) == 117 and loader.skipped == 3
    assert not any(k.endswith("_000001") for k in keys)


def test_worker_error_surfaces_instead_of_hanging(prepared_root):
    with pytest.raises(RuntimeError, match="part 'jpg' could not be decoded"):
        first_batch(prepared_root, workers=2, skip_errors=False)


class Crash(ea.DefaultTaskEncoder):
    decoder = None

    def encode_sample(self, sample):
        os._exit(3)


def test_worker_that_dies_does_not_hang(prepared_root):
    with pytest.raises(RuntimeError, match="exited unexpectedly"):
        first_batch(prepared_root, te=Crash(), workers=1)


def test_unknown_sample_type(dataset_copy):
    write_dataset_yaml(
        dataset_copy,
        "sample_type: {__module__: megatron.energon, __class__: FancySample}\nfield_map: {image: jpg}\n",
    )
    with pytest.raises(LoaderError, match=r"dataset.yaml:1: sample_type: unknown sample type .FancySample."):
        first_batch(dataset_copy)


def test_field_map_to_missing_part(dataset_copy):
    write_dataset_yaml(
        dataset_copy,
        "sample_type: {__module__: megatron.energon, __class__: CaptioningSample}\n"
        "field_map: {image: 'png,webp', caption: txt}\n",
    )
    with pytest.raises(
        MissingPartError, match=r"field 'image' maps to part 'png,webp', but the sample has only"
    ):
        first_batch(dataset_copy, te=RawTE(), skip_errors=False)


def test_field_map_unknown_field(dataset_copy):
    write_dataset_yaml(
        dataset_copy,
        "sample_type: {__module__: megatron.energon, __class__: CaptioningSample}\n"
        "field_map: {image: jpg, caption: txt, colour: json}\n",
    )
    with pytest.raises(LoaderError, match=r"fields \['colour'\] that CaptioningSample does not have"):
        first_batch(dataset_copy)


class RawTE(ea.DefaultTaskEncoder):
    decoder = None


def test_stale_shard_is_named(dataset_copy):
    shard = os.path.join(dataset_copy, "shards", "shard-000001.tar")
    with open(shard, "r+b") as f:
        f.truncate(os.path.getsize(shard) - 1024)
    with pytest.raises(Exception, match=r"shard-000001\.tar"):
        first_batch(dataset_copy, te=RawTE())


def test_not_prepared(tmp_path):
    with pytest.raises(Exception, match="not prepared"):
        first_batch(str(tmp_path))


def test_shard_truncated_after_opening_is_named_while_reading(dataset_copy):
    from energon_arrow.loader.errors import StaleIndexError

    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = ea.get_val_dataset(dataset_copy, worker_config=wc, batch_size=8, task_encoder=RawTE())
    shard = os.path.join(dataset_copy, "shards", "shard-000003.tar")
    with open(shard, "r+b") as f:
        f.truncate(4096)
    # checked when a worker first opens the shard (no stat per shard at open: loader/shard_check.py)
    with pytest.raises(
        StaleIndexError, match=r"shard-000003\.tar: shard changed since it was indexed \(size "
    ):
        list(ea.get_loader(ds))
