"""Receive buffers: bytes usable as they arrive, failures that wake every waiter, and recycled mappings that are
never handed out while anything still refers to them."""

from __future__ import annotations

import http.client
import io
import threading
import time

import pytest

from energon_arrow.adapters.receive import BLOCK, BufferPool, ReceiveBuffer


def test_a_waiter_returns_once_its_bytes_are_there_not_the_whole_body():
    buf = ReceiveBuffer(3 * BLOCK)
    body = io.BytesIO(bytes(range(256)) * (3 * BLOCK // 256))
    gate = threading.Event()
    steps = []

    def readinto(view):
        if steps:
            gate.wait(5)  # the body stalls after its first block
        steps.append(len(view))
        return body.readinto(view)

    fetch = threading.Thread(target=buf.receive, args=(readinto, 3 * BLOCK))
    fetch.start()
    buf.wait(BLOCK)  # returns while the rest is held back
    assert buf.received == BLOCK and not buf.complete
    assert bytes(buf.data[:BLOCK]) == body.getvalue()[:BLOCK]
    gate.set()
    buf.wait(3 * BLOCK)
    fetch.join()
    assert buf.complete and bytes(buf.data[: buf.size]) == body.getvalue()
    assert steps == [BLOCK] * 3


def test_a_short_body_is_an_incomplete_read_and_the_received_bytes_stay():
    buf = ReceiveBuffer(100)
    with pytest.raises(http.client.IncompleteRead):
        buf.receive(io.BytesIO(b"x" * 60).readinto, 100)
    assert buf.received == 60
    buf.receive(io.BytesIO(b"y" * 40).readinto, 40)  # a retry resumes after them
    assert bytes(buf.data[:100]) == b"x" * 60 + b"y" * 40
    with pytest.raises(ValueError, match="do not fit"):
        buf.write(b"z")


def test_a_failed_fetch_wakes_every_waiter_with_its_error():
    buf = ReceiveBuffer(10)
    buf.write(b"abc")
    buf.wait(3)  # already there: no wait
    errors = []

    def waiter():
        try:
            buf.wait(10)
        except OSError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=waiter) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.05)
    failure = OSError("gave up after 5 attempts")
    buf.fail(failure)
    for t in threads:
        t.join(5)
    assert errors == [failure] * 3


def test_the_pool_reuses_a_mapping_only_when_nothing_refers_to_it():
    pool = BufferPool(limit=1 << 30)
    first = pool.take(3 << 20)
    mapping = id(first.data)
    pool.give(first, lambda: True)
    del first
    again = pool.take(2 << 20)  # fits in the released one
    assert id(again.data) == mapping and again.received == 0 and again.size == 2 << 20

    view = memoryview(again.data)[10:20]  # a sample view a consumer still holds
    pool.give(again, lambda: True)
    del again
    held = pool.take(1 << 20)
    assert id(held.data) != mapping  # not handed out while the view lives
    del view
    pool.give(held, lambda: True)
    del held
    assert id(pool.take(2 << 20).data) == mapping  # once the view is gone


def test_the_pool_waits_for_the_fetch_writing_to_a_mapping():
    pool = BufferPool(limit=1 << 30)
    buf = pool.take(1 << 20)
    mapping = id(buf.data)
    fetch_ended = threading.Event()
    pool.give(buf, fetch_ended.is_set)
    del buf
    assert id(pool.take(1 << 20).data) != mapping  # its fetch may still write the tail no reader needed
    fetch_ended.set()
    assert id(pool.take(1 << 20).data) == mapping


def test_the_pool_keeps_at_most_its_limit_of_released_mappings():
    pool = BufferPool(limit=3 << 20)
    bufs = [pool.take(1 << 20) for _ in range(5)]
    for b in bufs:
        pool.give(b, lambda: True)
    assert sum(len(d) for d, _ in pool._free) == 3 << 20


def test_a_small_buffer_keeps_the_body_it_is_given_whole():
    buf = ReceiveBuffer(1000)
    assert buf.whole
    body = bytes(1000)
    buf.write(body)
    assert buf.data is body and buf.complete  # no copy, and slices of it are bytes
    pool = BufferPool(limit=1 << 30)
    small = pool.take(1000)
    pool.give(small, lambda: True)
    assert not pool._free  # small buffers are not pooled
