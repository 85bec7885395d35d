"""The workers' result pipe: enlarged to 1 MiB (or the system's limit) once the DataLoader's workers exist, with
every batch still delivered in order."""

from __future__ import annotations

import fcntl

import pytest
import torch

import energon_arrow as ea
from energon_arrow.loader import loader as loader_module
from energon_arrow.loader.loader import RESULT_PIPE_BYTES, widen_result_pipe

pytestmark = pytest.mark.skipif(not hasattr(fcntl, "F_GETPIPE_SZ"), reason="no pipe sizes on this platform")


def _limit() -> int:
    with open("/proc/sys/fs/pipe-max-size") as f:
        return min(RESULT_PIPE_BYTES, int(f.read()))


class _Blobs(torch.utils.data.IterableDataset):
    def __iter__(self):
        for i in range(20):
            yield bytes([i]) * 300_000  # larger than a default 64 KiB pipe


def test_widen_result_pipe_of_a_worker_iterator():
    dl = torch.utils.data.DataLoader(_Blobs(), batch_size=None, num_workers=1, multiprocessing_context="fork")
    it = iter(dl)
    assert widen_result_pipe(it) == _limit()
    fd = it._worker_result_queue._reader.fileno()
    assert fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ) == _limit()
    assert [b[0] for b in it] == list(range(20))


def test_no_pipe_without_workers():
    assert widen_result_pipe(iter(torch.utils.data.DataLoader(_Blobs(), batch_size=None))) == 0


def test_loader_widens_its_pipe(prepared_root, monkeypatch):
    sizes = []

    def spy(batches):
        sizes.append(widen_result_pipe(batches))
        return sizes[-1]

    monkeypatch.setattr(loader_module, "widen_result_pipe", spy)

    class RawTE(ea.DefaultTaskEncoder):
        decoder = None

    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=2)
    ds = ea.get_train_dataset(
        prepared_root, worker_config=wc, batch_size=4, shuffle_buffer_size=8, max_samples_per_sequence=5,
        task_encoder=RawTE(), repeat=False,
    )  # fmt: skip
    keys = [k for b in ea.get_loader(ds) for k in b.__key__]
    assert sizes == [_limit()]
    assert len(keys) == len(set(keys)) > 0
