"""Image batch slots registered with CUDA in place (images/slots.py, loader/host_pins.py): the transfer stage DMAs
straight from a slot, and a slot is never rewritten while a copy still reads it (the stale-DMA tests). The CUDA
tests run on a GPU machine (benchmarks/gpu_check.sh); without CUDA the board keeps its plain behaviour."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import energon_arrow as ea
from energon_arrow.images.slots import SlotAllocator, SlotBoard
from energon_arrow.loader.loader import Loader
from energon_arrow.loader.transfer import DeviceTransfer
from energon_arrow.testing.images import write_image_webdataset
from tests.loader.conftest import prepare

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@dataclasses.dataclass
class _Batch:  # a batch with one slot field (tensor_leaves walks dataclasses)
    image: torch.Tensor


@pytest.fixture(scope="module")
def image_root(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("slot-pins") / "ds")
    write_image_webdataset(root, shards=4, samples_per_shard=24, size=(64, 96), seed=11)
    prepare(root, split_ratio="1,0,0")
    return root


def _uint8_dataset(root: str, workers: int):
    te = ea.DefaultTaskEncoder()
    te.decoder = ea.SampleDecoder(image_decode="torchrgb8")
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=workers)
    return ea.get_train_dataset(
        root, worker_config=wc, batch_size=4, shuffle_buffer_size=None, task_encoder=te, repeat=False
    )


def test_board_without_a_device_registers_nothing():
    board = SlotBoard(1, 2)
    alloc = SlotAllocator(board, 0)
    t = alloc.tensor((1024,), torch.uint8, "image")
    board.hold(_Batch(t), alloc.take())
    assert board._pins is None and not t.is_pinned()
    board.clear()


@cuda
def test_slot_is_registered_once_and_unregistered_on_clear():
    board = SlotBoard(1, 2, pin_device=torch.device("cuda", torch.cuda.current_device()))
    alloc = SlotAllocator(board, 0)
    for _ in range(4):  # two slots, each used twice
        t = alloc.tensor((1 << 20,), torch.uint8, "image")
        board.hold(_Batch(t), alloc.take())
        assert t.is_pinned()
        del t
        board.release_dropped()
    assert len(board._pins) == 2
    kept = [entry[1] for entry in board._held.values()]
    board.clear()
    assert len(board._pins) == 0
    assert not any(torch.empty(0, dtype=torch.uint8).set_(s).is_pinned() for s in kept)


@cuda
def test_a_slot_being_copied_is_not_released_to_its_worker():
    """Stale DMA, in-process and deterministic: the copy of batch 0 is held back on the transfer stream; the user
    drops the host batch at once; the slot must stay unreleased (the worker then takes fresh memory instead of
    rewriting it), and the device shows batch 0's bytes, never the next batch's."""
    device = torch.device("cuda", torch.cuda.current_device())
    board = SlotBoard(1, 1, pin_device=device)
    alloc = SlotAllocator(board, 0)
    transfer = DeviceTransfer(device, depth=1)
    t = alloc.tensor((8 << 20,), torch.uint8, "image")
    t.fill_(7)
    board.hold(_Batch(t), alloc.take())
    first_storage = t.untyped_storage().data_ptr()
    with torch.cuda.stream(transfer._stream):
        torch.cuda._sleep(200_000_000)  # the copy queued behind ~0.1 s of GPU sleep
    out = transfer.finish(transfer.start(_Batch(t)))
    del t
    board.release_dropped()
    assert int(board.released[0, 0]) < 0  # still being read: not handed back
    nxt = alloc.tensor((8 << 20,), torch.uint8, "image")  # the worker's next batch in slot 0
    assert nxt.untyped_storage().data_ptr() != first_storage  # fresh memory, not the slot being read
    nxt.fill_(9)
    torch.cuda.synchronize()
    assert int(out.image.min()) == 7 and int(out.image.max()) == 7
    board.hold(_Batch(nxt), alloc.take())
    transfer.start(_Batch(torch.zeros(1)))  # the next start drops what finished copies held
    board.release_dropped()
    board.clear()


@cuda
def test_loader_batches_on_the_device_match_the_host_batches(image_root):
    """Stale DMA, end to end: 2 workers, 1 batch of prefetch, every batch dropped at once so slots recycle as
    fast as they can; every device batch equals the same batch loaded on the host."""
    host = [
        b.image.clone() for b in Loader(_uint8_dataset(image_root, 2), 2, prefetch_factor=1, device="cpu")
    ]
    on_device = [
        b.image.cpu() for b in Loader(_uint8_dataset(image_root, 2), 2, prefetch_factor=1, device="cuda")
    ]
    assert len(host) == len(on_device) == 24
    for a, b in zip(host, on_device):
        assert torch.equal(a, b)


@cuda
def test_state_on_the_device_counts_delivered_batches(image_root):
    """A state saved after k batches on the GPU resumes at batch k (the transfer stage takes no batch ahead)."""
    whole = [b.__key__ for b in Loader(_uint8_dataset(image_root, 2), 2, device="cuda")]
    loader = Loader(_uint8_dataset(image_root, 2), 2, device="cuda")
    it = iter(loader)
    first = [next(it).__key__ for _ in range(5)]
    state = loader.state_dict()
    it.close()
    resumed = Loader(_uint8_dataset(image_root, 2), 2, device="cuda")
    resumed.load_state_dict(state)
    assert first + [b.__key__ for b in resumed] == whole
