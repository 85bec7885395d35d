"""`run_ahead`: a stage computed in a background thread ahead of its consumer (order, marks, errors, early close),
and the loader's `image_device_decode=True` path that uses it: its state counts delivered batches only."""

from __future__ import annotations

import threading
import time

import pytest

import energon_arrow as ea
from energon_arrow.images import jpeg_bytes
from energon_arrow.loader.loader import Loader
from energon_arrow.loader.run_ahead import run_ahead
from tests.images.test_image_gpu_decode import PillowDecodeJpeg
from tests.images.test_slot_pins import image_root  # noqa: F401 - a fixture (real JPEGs)


def _items(n: int, log: list, closed: list):
    try:
        for i in range(n):
            log.append(i)
            yield (i, f"mark{i}"), i
    finally:
        closed.append(threading.current_thread().name)


def test_items_come_in_order_with_their_marks_and_at_most_depth_ahead():
    pulled, closed = [], []
    out = []
    for mark, value in run_ahead(_items(20, pulled, closed), lambda v: v * 10, None, depth=2):
        time.sleep(0.005)
        assert len(pulled) <= mark[0] + 1 + 2 + 1  # the delivered one, the queue (2), the one being worked on
        out.append((mark, value))
    assert out == [((i, f"mark{i}"), i * 10) for i in range(20)]
    assert closed == ["energon-arrow-run-ahead"]  # the source is closed in the thread that iterated it


def test_an_error_in_the_work_is_raised_in_the_consumer_after_the_items_before_it():
    def work(v):
        if v == 3:
            raise ValueError("bad item 3")
        return v

    got, closed = [], []
    with pytest.raises(ValueError, match="bad item 3"):
        for _, value in run_ahead(_items(10, [], closed), work, None):
            got.append(value)
    assert got == [0, 1, 2] and closed


def test_leaving_early_stops_the_thread_and_closes_the_source():
    pulled, closed = [], []
    it = run_ahead(_items(1000, pulled, closed), lambda v: v, None, depth=2)
    assert [next(it)[1] for _ in range(3)] == [0, 1, 2]
    it.close()
    assert closed and len(pulled) < 10
    assert not any(t.name == "energon-arrow-run-ahead" for t in threading.enumerate())


def test_none_values_pass_through_without_work():
    items = iter([(("a",), 1), (("end",), None)])
    assert list(run_ahead(items, lambda v: v + 1, None)) == [(("a",), 2), (("end",), None)]


@pytest.fixture
def standin(monkeypatch) -> PillowDecodeJpeg:
    fn = PillowDecodeJpeg()
    monkeypatch.setattr(jpeg_bytes, "batched_jpeg_decoder", lambda: fn)
    return fn


def _device_decode_loader(root: str, workers: int) -> Loader:
    te = ea.DefaultTaskEncoder()
    te.decoder = ea.SampleDecoder(image_decode="torchrgb8", image_device_decode=True)
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=workers)
    ds = ea.get_train_dataset(
        root, worker_config=wc, batch_size=4, shuffle_buffer_size=None, task_encoder=te, repeat=False
    )
    return Loader(ds, workers, device="cpu")


@pytest.mark.parametrize("workers", [0, 2])
def test_device_decode_state_counts_delivered_batches(standin, image_root, workers):  # noqa: F811
    """The decode thread runs ahead of the consumer; a state saved after 5 batches still resumes at batch 5."""
    whole = [b.__key__ for b in _device_decode_loader(image_root, workers)]
    loader = _device_decode_loader(image_root, workers)
    it = iter(loader)
    first = [next(it).__key__ for _ in range(5)]
    time.sleep(0.2)  # let the thread run ahead
    state = loader.state_dict()
    it.close()
    assert state["next_batch"] == 5
    resumed = _device_decode_loader(image_root, workers)
    resumed.load_state_dict(state)
    assert first + [b.__key__ for b in resumed] == whole
    assert len(whole) == len(loader) and standin.calls
