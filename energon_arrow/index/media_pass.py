"""Whether a prepare has a media pass, decided without importing any media reader (`media_prepare` and the
readers it pulls in load only when a filter is given or the previous index has media tables)."""

from __future__ import annotations

from energon_arrow.index.media_tables import has_media_tables
from energon_arrow.meta.constants import INDEX_SQLITE, META_DIR


def media_pass(storage, build: str, media_filter, workers: int):
    """The media tables' part of a prepare (a `media_prepare.MediaPass`), None when there is none: no filter given and
    no media tables in the previous index (then nothing media-related is imported)."""
    previous = storage.local_path(f"{META_DIR}/{INDEX_SQLITE}") if storage.is_local else None
    if previous is not None and not has_media_tables(previous):
        previous = None
    if media_filter is None and previous is None:
        return None
    from energon_arrow.index.media_prepare import MediaPass

    return MediaPass(storage, build, media_filter, workers, previous)
