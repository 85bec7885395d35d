"""Windows handed between DataLoader workers through files: links per reader, fallbacks, clean-up."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

import energon_arrow.loader.window_share as ws
from energon_arrow.loader.window_share import PREFIX, WindowShare


@pytest.fixture(autouse=True)
def roomy(monkeypatch):
    """tmp_path stands for /dev/shm: say it is nearly empty whatever the disk under it holds."""

    class Fs:
        f_frsize, f_blocks, f_bavail = 4096, 1 << 20, (1 << 20) - 1

    monkeypatch.setattr(ws.os, "statvfs", lambda path: Fs)


def _shares(root, workers=3, wait_s=5.0):
    folder = os.path.join(root, PREFIX + f"{os.getpid()}-1-2")
    return [WindowShare(folder, k, workers, wait_s) for k in range(workers)], folder


def test_each_reader_takes_its_link_once_and_nothing_stays(tmp_path):
    (a, b, c), folder = _shares(tmp_path)
    a.publish("0-1", b"0123456789", [0, 1, 2])
    assert sorted(os.listdir(folder)) == ["0-1.1", "0-1.2"]  # no link for the fetcher itself, no temp file
    got_b = b.take("0-1", 10)
    assert bytes(got_b) == b"0123456789"
    assert memoryview(got_b).readonly
    assert bytes(c.take("0-1", 10)[2:5]) == b"234"
    assert os.listdir(folder) == []  # the mappings hold the bytes now


def test_a_reader_waits_for_the_link(tmp_path):
    (a, b), _ = _shares(tmp_path, workers=2)
    later = threading.Timer(0.2, a.publish, ("3-0", b"abc", [1]))
    later.start()
    t0 = time.monotonic()
    assert bytes(b.take("3-0", 3)) == b"abc"
    assert time.monotonic() - t0 >= 0.1
    later.join()


def test_a_link_that_does_not_come_means_fetch_it_yourself_and_stop_waiting(tmp_path):
    (a, b), _ = _shares(tmp_path, workers=2, wait_s=0.05)
    assert b.take("0-0", 3) is None
    assert not b.waiting
    a.publish("0-1", b"abc", [1])
    assert b.take("0-1", 3) is None  # no more waiting: every later window is fetched by the reader itself


def test_an_empty_or_wrong_sized_link_means_fetch_it_yourself(tmp_path):
    (a, b), folder = _shares(tmp_path, workers=2)
    a.publish("0-0", b"", [1])
    assert b.take("0-0", 3) is None
    a.publish("0-1", b"ab", [1])
    assert b.take("0-1", 3) is None
    assert b.waiting and os.listdir(folder) == []


def test_a_failed_write_gives_empty_links(tmp_path, monkeypatch):
    (a, b), _ = _shares(tmp_path, workers=2)
    real = ws._write_file

    def full(path, data):
        if len(data):
            raise OSError(28, "No space left on device")
        real(path, data)

    monkeypatch.setattr(ws, "_write_file", full)
    a.publish("0-0", b"abc", [0, 1])
    assert b.take("0-0", 3) is None


def test_close_removes_unread_links_and_the_last_worker_the_folder(tmp_path):
    (a, b, c), folder = _shares(tmp_path)
    a.publish("0-0", b"abc", [1, 2])
    b.close()
    assert sorted(os.listdir(folder)) == ["0-0.2", "stopped.1"]
    a.close()
    assert os.path.isdir(folder)
    c.close()
    assert not os.path.exists(folder)
    a.publish("0-1", b"abc", [1])  # a fetch finishing after every reader stopped: nothing to do
    assert not os.path.exists(folder)


def test_folders_of_exited_loaders_are_removed(tmp_path):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    stale = tmp_path / f"{PREFIX}{int(dead.stdout)}-5-6"
    stale.mkdir()
    (stale / "0-0.1").write_bytes(b"x")
    live = tmp_path / f"{PREFIX}{os.getpid()}-5-6"
    live.mkdir()
    share = WindowShare.for_worker(f"{os.getpid()}-7-8", 0, 2, root=str(tmp_path))
    assert share is not None
    assert not stale.exists() and live.exists()
    assert WindowShare.for_worker("x", 0, 1, root=str(tmp_path)) is None  # one worker: nothing to share


def test_windows_are_not_shared_when_shared_memory_would_be_half_full(tmp_path, monkeypatch):
    (a, b), _ = _shares(tmp_path, workers=2)

    class Fs:  # 100 blocks of 10 bytes, 55 free
        f_frsize, f_blocks, f_bavail = 10, 100, 55

    monkeypatch.setattr(ws.os, "statvfs", lambda path: Fs)
    a.publish("0-0", b"x" * 50, [1])  # 500 of 1000 bytes would stay free: shared
    assert bytes(b.take("0-0", 50)) == b"x" * 50
    a.publish("0-1", b"x" * 51, [1])  # 499 free: not shared, the reader fetches it
    assert b.take("0-1", 51) is None and b.waiting
