"""The progress bar of `energon-arrow prepare`: shards, samples/s, bytes/s and ETA."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.text import Text


class _SamplesPerSecond(ProgressColumn):
    def render(self, task) -> Text:
        elapsed = task.elapsed or 0.0
        rate = task.fields.get("samples", 0) / elapsed if elapsed > 0 else 0.0
        return Text(f"{rate:,.0f} samples/s", style="progress.data.speed")


class _Shards(ProgressColumn):
    def render(self, task) -> Text:
        return Text(f"{task.fields.get('shards', 0):,}/{task.fields.get('total_shards', 0):,} shards")


class ShardProgress:
    """A rich progress bar over shards; advances by bytes so the ETA follows the data volume."""

    def __init__(self, console: Console):
        self._progress = Progress(
            TextColumn("indexing"),
            BarColumn(),
            _Shards(),
            _SamplesPerSecond(),
            TransferSpeedColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self._task = None
        self._shards = 0
        self._samples = 0

    def start(self, shards: int, nbytes: int) -> None:
        self._progress.start()
        self._task = self._progress.add_task(
            "indexing", total=max(nbytes, 1), samples=0, shards=0, total_shards=shards
        )

    def advance(self, path: str, samples: int, nbytes: int) -> None:
        self._shards += 1
        self._samples += samples
        self._progress.update(self._task, advance=nbytes, samples=self._samples, shards=self._shards)

    def stop(self) -> None:
        if self._task is not None:
            self._progress.stop()
