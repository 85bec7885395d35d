"""DuckDB resource settings of a dataset's query connection: memory limit, spill folder, threads.

A query over a 100M-sample side index (GROUP BY, joins, split resolution with a million exclusions) must not
take the host's memory: DuckDB's own default is 80% of RAM, shared here with training processes and loaders.
`QueryLimits()` sets a bounded default (half the physical memory, at most 4 GiB), a private spill folder in the
system temp folder (DuckDB writes there only what does not fit and removes it at close) and DuckDB's default
thread count. Each can be overridden (API: `open_dataset(..., limits=QueryLimits(...))`; CLI: `--memory-limit`,
`--temp-directory`, `--threads`; environment: ENERGON_ARROW_QUERY_MEMORY_LIMIT, ENERGON_ARROW_QUERY_TEMP_DIRECTORY,
ENERGON_ARROW_QUERY_THREADS).
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass

from energon_arrow.query.errors import QueryError

DEFAULT_MAX_BYTES = 4 << 30
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(b|kb|mb|gb|tb|kib|mib|gib|tib)?\s*", re.IGNORECASE)


def physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def default_memory_limit() -> str:
    total = physical_memory()
    limit = DEFAULT_MAX_BYTES if total is None else min(DEFAULT_MAX_BYTES, total // 2)
    return f"{limit // (1 << 20)}MiB"


def default_temp_directory() -> str:
    return os.path.join(tempfile.gettempdir(), f"energon-arrow-duckdb-{os.getpid()}")


def check_memory_limit(text: str) -> str:
    """`text` if DuckDB can read it as a size (`4GB`, `512MiB`, `2.5GB`); QueryError naming it otherwise."""
    if not _SIZE.fullmatch(text):
        raise QueryError(f"memory limit {text!r}: expected a size such as 4GB, 512MiB or 2.5GB")
    return text.strip()


@dataclass(frozen=True)
class QueryLimits:
    """None: the environment variable when set, else the default."""

    memory_limit: str | None = None
    temp_directory: str | None = None
    threads: int | None = None

    def resolved(self) -> tuple[str, str, int | None]:
        memory = (
            self.memory_limit or os.environ.get("ENERGON_ARROW_QUERY_MEMORY_LIMIT") or default_memory_limit()
        )
        temp = (
            self.temp_directory
            or os.environ.get("ENERGON_ARROW_QUERY_TEMP_DIRECTORY")
            or default_temp_directory()
        )
        threads = self.threads
        if threads is None and os.environ.get("ENERGON_ARROW_QUERY_THREADS"):
            value = os.environ["ENERGON_ARROW_QUERY_THREADS"]
            if not value.isdigit():
                raise QueryError(f"ENERGON_ARROW_QUERY_THREADS={value!r}: expected a positive integer")
            threads = int(value)
        if threads is not None and threads < 1:
            raise QueryError(f"threads {threads}: expected at least 1")
        return check_memory_limit(memory), temp, threads

    def apply(self, con) -> None:
        """Set them on `con` (before its configuration is locked). DuckDB creates the spill folder when it first
        spills, and spills there also with external access off."""
        memory, temp, threads = self.resolved()
        con.execute("SET enable_progress_bar = false")  # long queries would draw DuckDB's bar on the terminal
        con.execute(f"SET memory_limit = '{memory}'")
        con.execute("SET temp_directory = '" + temp.replace("'", "''") + "'")
        if threads is not None:
            con.execute(f"SET threads = {int(threads)}")
