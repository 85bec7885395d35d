"""An error in a DataLoader worker reaches the training process as itself (loader/worker_failure.py): the same type
and message as with no workers (torch's transport turned a StorageError into a RuntimeError, and every error's
message began with `Caught ... in DataLoader worker N`), the worker's traceback attached as a note."""

from __future__ import annotations

import os

import pytest

from energon_arrow.loader import BatchDataset, Loader, LoaderSettings, open_split
from energon_arrow.samples.decoders import PartDecoder
from energon_arrow.testing.synthetic import write_webdataset
from tests.loader.conftest import prepare


def _error_of(root: str, workers: int) -> BaseException:
    src = open_split(root, "train")
    ds = BatchDataset(
        [src], LoaderSettings(global_batch_size=4, seed=1, repeat=False), decoder=PartDecoder(raw=True)
    )
    shard = os.path.join(root, "shards", "shard-000001.tar")
    size = os.path.getsize(shard)
    os.truncate(shard, size // 2)  # after the split was opened: the reads of the second half fail
    try:
        with pytest.raises(Exception) as err:
            for _ in Loader(ds, num_workers=workers):
                pass
    finally:
        os.truncate(shard, 0)
    return err.value


def test_a_worker_error_is_raised_as_itself(tmp_path):
    errors = {}
    for workers in (0, 2):
        root = str(tmp_path / f"w{workers}")
        write_webdataset(root, shards=3, samples_per_shard=20, image_bytes=3000)
        prepare(root, split_ratio="1,0,0")
        errors[workers] = _error_of(root, workers)
    alone, in_worker = errors[0], errors[2]
    assert type(in_worker) is type(alone)
    assert str(in_worker).replace("/w2", "/w0") == str(alone) and "shard-000001.tar" in str(in_worker)
    assert any("raised in DataLoader worker" in note for note in getattr(in_worker, "__notes__", ()))


def test_an_error_with_a_two_argument_constructor_keeps_its_type():
    """StorageError(url, reason) cannot be re-created from torch's message; carried as an item it keeps its type."""
    from energon_arrow.adapters import StorageError
    from energon_arrow.loader.worker_failure import WorkerFailure, failures_as_items, raise_failure

    def stream():
        yield (0, 0, "batch", ())
        raise StorageError("s3://b/ds/shard-000001.tar", "GET: gave up after 5 attempts")

    items = list(failures_as_items(stream(), lambda failure: (-1, 0, failure, ())))
    assert items[0] == (0, 0, "batch", ()) and isinstance(items[1][2], WorkerFailure)
    with pytest.raises(StorageError) as err:
        raise_failure(items[1][2])
    assert str(err.value) == "s3://b/ds/shard-000001.tar: GET: gave up after 5 attempts"
