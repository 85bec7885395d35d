"""`energon-arrow analyze-debug`: energon's command reads the worker debug logs its loader writes
(`WorkerConfig(worker_debug_path=..., worker_log_level=...)`) to plot which samples each step loaded. energon-arrow's
loader writes no such logs: its batch sequence is a pure function of the loader settings, so the command refuses
with the reason (docs/cli.md) instead of accepting energon's arguments and doing something else."""

from __future__ import annotations

from energon_arrow.cli.common import not_provided

REASON = (
    "analyze-debug is not provided: energon-arrow's loader writes no worker debug logs (energon's "
    "worker_debug_path / worker_log_level); which samples a step loads is a pure function of the loader "
    "settings saved in its state (see `energon-arrow checkpoint FILE`), so rebuilding the dataset with those "
    "settings and iterating replays the exact batches; see docs/cli.md#energon-arrow-analyze-debug"
)


command = not_provided(
    "analyze-debug",
    REASON,
    """Not provided: energon-arrow's loader keeps no worker debug logs (its batch order is a pure function of the
    loader settings); prints why and exits 1 whatever energon arguments it gets.""",
)
