"""The window reader's receive buffers: recycled within the byte budget, and never while a consumer still holds
a view of the bytes of an earlier batch."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from energon_arrow.adapters import open_storage
from energon_arrow.loader.remote_plan import RemoteReadSettings
from energon_arrow.loader.window_reader import BatchFeed, WindowReader

SHARDS, PER_SHARD, SIZE, BATCH = (
    4,
    100,
    1 << 16,
    4,
)  # windows of 16-32 samples: 1-2 MiB, received into mappings


def _source(tmp_path):
    rng = np.random.default_rng(0)
    blobs = []
    for s in range(SHARDS):
        blob = rng.integers(0, 256, PER_SHARD * SIZE, dtype=np.uint8).tobytes()
        (tmp_path / f"shard-{s}.tar").write_bytes(blob)
        blobs.append(blob)
    rows = np.arange(SHARDS * PER_SHARD, dtype=np.int64)
    src = SimpleNamespace(
        name="windows",
        storage=open_storage(str(tmp_path)),
        shard_paths=[f"shard-{s}.tar" for s in range(SHARDS)],
        shard_id=rows // PER_SHARD,
        byte_offset=(rows % PER_SHARD) * SIZE,
        byte_size=np.full(rows.size, SIZE, np.int64),
    )
    return src, blobs


def _rows(batch: int) -> np.ndarray:
    """Batches that walk the shards in turn, a few samples of each: every window is read by several batches."""
    i = np.arange(batch * BATCH, batch * BATCH + BATCH)
    return (i % SHARDS) * PER_SHARD + (i // SHARDS) % PER_SHARD


def _reader(src, batches: int) -> WindowReader:
    """A reader of `batches` batches whose byte budget holds a few windows: released ones are used again."""
    settings = RemoteReadSettings(
        byte_budget=96 * SIZE, max_window=32 * SIZE, first_plan_batches=2, plan_batches=8, merge_gap=0
    )
    return WindowReader(src, BatchFeed(lambda bs: [_rows(b) for b in bs], 0, batches), settings)


def test_recycled_windows_never_change_the_bytes_a_consumer_holds(tmp_path):
    src, blobs = _source(tmp_path)
    batches = 200
    reader = _reader(src, batches)

    def expected(rows):
        return [blobs[r // PER_SHARD][(r % PER_SHARD) * SIZE :][:SIZE] for r in rows.tolist()]

    held = []
    for b in range(batches):
        rows = _rows(b)
        spans = reader.read(rows)
        assert spans.payloads(np.zeros(len(rows), np.int64), np.full(len(rows), SIZE)) == expected(rows)
        if b % 25 == 0:
            held.append((rows, list(spans)))  # zero-copy views of the windows, kept past their last read
        del spans
    reader.close()
    for rows, views in held:
        assert [bytes(v) for v in views] == expected(rows)


def test_released_windows_are_received_into_the_same_memory_again(tmp_path):
    src, _ = _source(tmp_path)
    batches = 200
    reader = _reader(src, batches)
    mappings = []
    take = reader._buffers.take

    def recorded(size):
        buf = take(size)
        mappings.append(id(buf.data))
        return buf

    reader._buffers.take = recorded
    for b in range(batches):
        reader.read(_rows(b))
    reader.close()
    assert len(mappings) > 25  # 800 samples in windows of at most 32
    assert len(set(mappings)) <= 8  # a few mappings, used over and over


def test_a_read_waiting_on_a_fetch_cancelled_by_close_raises(tmp_path, monkeypatch):
    import threading

    import pytest

    from energon_arrow.loader import window_reader
    from energon_arrow.loader.errors import LoaderError

    src, _ = _source(tmp_path)
    release = threading.Event()
    real = window_reader.fetch_into

    def held_fetch(*args, **kw):  # the first fetch holds the only fetch thread until the reader is closed
        release.wait(10)
        return real(*args, **kw)

    monkeypatch.setattr(window_reader, "fetch_into", held_fetch)
    settings = RemoteReadSettings(byte_budget=1 << 30, max_window=16 * SIZE, concurrency=1)
    reader = WindowReader(src, BatchFeed(lambda bs: [_rows(b) for b in bs], 0, 200), settings)
    for b in range(40):
        reader.announce(_rows(b))
    queued = [w for w in reader._windows.values() if w.future is not None and not w.future.running()]
    assert queued
    reader.close()
    release.set()
    errors = []
    waiter = threading.Thread(
        target=lambda: errors.append(pytest.raises(LoaderError, queued[-1].recv.wait, 1))
    )
    waiter.start()
    waiter.join(10)  # before the fix it waited forever
    assert not waiter.is_alive() and "closed before this window was fetched" in str(errors[0].value)
