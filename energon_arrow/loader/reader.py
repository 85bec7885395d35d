"""Per-batch reads of whole samples, coalesced per shard.

Local shards: rows are grouped by shard and merged into runs of nearby samples (a block of the epoch order is
contiguous on disk), each run is one `os.pread` on a per-process cached descriptor, and every sample is a
memoryview into the run's buffer. Object stores: `Storage.read_ranges` (coalesced, concurrent ranged GETs).
"""

from __future__ import annotations

import os

import numpy as np

from energon_arrow.loader.errors import StaleIndexError
from energon_arrow.loader.shard_files import ShardFiles
from energon_arrow.loader.source import SplitSource

MAX_GAP = 64 * 1024  # bytes of unneeded data worth reading to merge two runs


class SampleReader:
    def __init__(self, src: SplitSource, max_fds: int = 128):
        self.src = src
        self.local = src.storage.is_local
        self._files = ShardFiles(max_fds)

    def _fd(self, shard: int) -> int:
        path = self.src.storage.local_path(self.src.shard_paths[shard])
        try:
            return self._files.fd(path)
        except OSError as exc:
            raise StaleIndexError(f"{path}: cannot open shard listed in the index: {exc.strerror}") from None

    def read(self, rows: np.ndarray) -> list[memoryview]:
        """The bytes of each row's sample, in `rows` order."""
        src = self.src
        shard, offset, size = src.shard_id[rows], src.byte_offset[rows], src.byte_size[rows]
        if not self.local:
            rels = [src.shard_paths[s] for s in shard.tolist()]
            return src.storage.read_ranges(rels, offset, size)
        # one pass over all shards of the batch (a loop over shards with adapters.ranges per shard measured 2-3x
        # slower for batches drawn from a few blocks)
        order = np.lexsort((offset, shard))
        s_shard, s_off = shard[order], offset[order]
        s_end = s_off + size[order]
        run_end = np.maximum.accumulate(s_end)  # within a shard group; reset handled by the shard test
        new = np.ones(len(rows), bool)
        new[1:] = (s_shard[1:] != s_shard[:-1]) | (s_off[1:] > run_end[:-1] + MAX_GAP)
        starts = np.flatnonzero(new)
        ends = np.r_[starts[1:], len(rows)]
        out: list[memoryview | None] = [None] * len(rows)
        order_l = order.tolist()
        for a, b in zip(starts.tolist(), ends.tolist()):
            lo, hi = int(s_off[a]), int(s_end[a:b].max())
            sid = int(s_shard[a])
            data = os.pread(self._fd(sid), hi - lo, lo)
            if len(data) != hi - lo:
                raise StaleIndexError(
                    f"{src.storage.url_of(src.shard_paths[sid])}: shard ends before byte {hi} that the index "
                    f"expects (shard changed since prepare); run prepare again"
                )
            view = memoryview(data)
            for j in range(a, b):
                o = int(s_off[j]) - lo
                out[order_l[j]] = view[o : o + int(s_end[j] - s_off[j])]
        return out  # type: ignore[return-value]

    def close(self) -> None:
        self._files.close()
