"""energon's watchdog: when producing the next batch takes longer than a timeout, print the stacks of all threads
of the producing process (a DataLoader worker, or the main process without workers) and warn; with
`fail_on_timeout` the process then exits.

Arming costs two clock reads per batch; one monitor thread per iteration waits for the deadline.
"""

from __future__ import annotations

import os
import sys
import threading
import traceback
import warnings
from collections.abc import Iterator
from time import perf_counter
from typing import Any


class Watchdog:
    def __init__(self, timeout: float, initial_timeout: float | None = None, fail_on_timeout: bool = False):
        self.timeout, self.initial_timeout, self.fail_on_timeout = timeout, initial_timeout, fail_on_timeout
        self._deadline: float | None = None
        self._stop = threading.Event()

    def watch_iter(self, it: Iterator[Any]) -> Iterator[Any]:
        """The items of `it`; each `next()` is watched, the time between items is not."""
        monitor = threading.Thread(target=self._monitor, name="energon-arrow-watchdog", daemon=True)
        monitor.start()
        first = True
        try:
            while True:
                limit = self.initial_timeout if first and self.initial_timeout is not None else self.timeout
                self._deadline = perf_counter() + limit
                try:
                    item = next(it)
                except StopIteration:
                    return
                finally:
                    self._deadline = None
                first = False
                yield item
        finally:
            self._stop.set()

    def _monitor(self) -> None:
        while not self._stop.is_set():
            deadline = self._deadline
            if deadline is None:
                self._stop.wait(min(1.0, self.timeout))
                continue
            remaining = deadline - perf_counter()
            if remaining > 0:
                self._stop.wait(remaining)
                continue
            if self._deadline == deadline:  # the same batch is still awaited: it timed out
                self._fire()
                return

    def _fire(self) -> None:
        message = f"Watchdog triggered: producing a batch took longer than {self.timeout} seconds"
        lines = [f"{message}; stacks of all threads of process {os.getpid()}:\n"]
        names = {t.ident: t.name for t in threading.enumerate()}
        for ident, frame in sys._current_frames().items():
            if ident == threading.get_ident():
                continue
            lines.append(f'Thread {ident} "{names.get(ident, "?")}":\n')
            lines.extend(traceback.format_stack(frame))
        sys.stderr.write("".join(lines))
        sys.stderr.flush()
        if self.fail_on_timeout:
            sys.stderr.write(f"{message}; fail_on_timeout=True: exiting\n")
            sys.stderr.flush()
            os._exit(1)
        warnings.warn(message, RuntimeWarning, stacklevel=1)
