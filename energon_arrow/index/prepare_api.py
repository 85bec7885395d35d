"""energon's programmatic prepare, `BaseWebdatasetFactory.prepare_dataset(parent_path, paths, ...)`, over
energon-arrow's prepare (index/prepare.py): the same keywords, the same files written, and energon's return value,
the set of part types found. `progress_fn(iterator, length)` (energon's progress bar wrapper) is driven by the
shards as they are indexed: prepare runs in a thread and reports each finished shard through a queue."""

from __future__ import annotations

import queue
import threading
from typing import Any

_DONE = object()


class _QueueProgress:
    def __init__(self):
        self.items: queue.Queue = queue.Queue()
        self.length = threading.Event()
        self.total = 0

    def start(self, shards: int, nbytes: int) -> None:
        self.total = shards
        self.length.set()

    def advance(self, path: str, samples: int, nbytes: int) -> None:
        self.items.put(path)


def prepare_dataset(
    parent_path: Any,
    paths: list[str],
    *,
    split_parts_ratio: list[tuple[str, float]] | None = None,
    split_parts_patterns: list[tuple[str, str]] | None = None,
    split_config: str = "split.yaml",
    shuffle_seed: int | None = 42,
    progress_fn: Any = None,
    workers: int = 32,
    tar_index_only: bool = False,
    media_filter: Any = None,
    fix_duplicates: bool = False,
    index_sqlite_tmp_path: Any = None,
    storage_options: dict | None = None,
) -> set[str]:
    """Index `paths` (shards relative to `parent_path`, brace patterns allowed) and write `.nv-meta` like energon's
    classmethod; returns the part types found. `media_filter`: a MediaFilterConfig (ours, index/media_extract.py,
    or any object with energon's `strategy` and `patterns`) writes the media metadata tables. Not provided:
    `fix_duplicates`, a `split_config` other than split.yaml (errors naming them)."""
    from energon_arrow.index.prepare import PrepareOptions
    from energon_arrow.index.prepare import prepare_dataset as prepare
    from energon_arrow.meta.braces import expand_all
    from energon_arrow.meta.errors import MetaError

    refused = {
        "fix_duplicates": bool(fix_duplicates),
        "split_config": split_config != "split.yaml",
    }
    if any(refused.values()):
        raise MetaError(
            f"prepare_dataset: not supported by energon-arrow: {[k for k, v in refused.items() if v]}"
        )
    if media_filter is not None and tar_index_only:
        raise MetaError("prepare_dataset: media_filter cannot be combined with tar_index_only")
    options = PrepareOptions(
        split_ratio=None if split_parts_patterns else list(split_parts_ratio or [("train", 1.0)]),
        split_parts=list(split_parts_patterns) if split_parts_patterns else None,
        shuffle_tars=shuffle_seed is not None,
        shuffle_seed=42 if shuffle_seed is None else int(shuffle_seed),
        num_workers=max(1, int(workers)),
        tar_index_only=tar_index_only,
        tmp_path=None if index_sqlite_tmp_path is None else str(index_sqlite_tmp_path),
        shards=expand_all([str(p) for p in paths]),
        media_filter=None if media_filter is None else _media_filter(media_filter),
    )
    url = str(getattr(parent_path, "url", parent_path))
    if progress_fn is None:
        result = prepare(url, options, storage_options)
        return set(result.part_types)
    progress, out = _QueueProgress(), {}

    def run():
        try:
            out["result"] = prepare(url, options, storage_options, progress)
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            out["error"] = exc
        finally:
            progress.length.set()
            progress.items.put(_DONE)

    thread = threading.Thread(target=run, name="energon-arrow-prepare", daemon=True)
    thread.start()
    progress.length.wait()
    for _ in progress_fn(iter(progress.items.get, _DONE), progress.total):
        pass
    thread.join()
    if "error" in out:
        raise out["error"]
    return set(out["result"].part_types)


def _media_filter(value: Any):
    """Ours as it is; energon's (or any object with its `strategy` and `patterns`) converted."""
    from energon_arrow.index.media_extract import MediaFilterConfig, MediaFilterStrategy
    from energon_arrow.meta.errors import MetaError

    if isinstance(value, MediaFilterConfig):
        return value
    strategy = getattr(getattr(value, "strategy", None), "value", getattr(value, "strategy", None))
    try:
        return MediaFilterConfig(
            MediaFilterStrategy(str(strategy)), list(getattr(value, "patterns", []) or [])
        )
    except ValueError:
        raise MetaError(
            f"prepare_dataset: media_filter must be a MediaFilterConfig (strategy GLOB, HEADER or EXTENSION), "
            f"got {value!r}"
        ) from None
