"""`.nv-meta/index.uuid`: `str(uuid4())`, 36 characters, no newline; new whenever prepare wrote index rows."""

from __future__ import annotations

import uuid

from energon_arrow.adapters import NotFound
from energon_arrow.meta.constants import INDEX_UUID, META_DIR
from energon_arrow.meta.manifest import read_text_verified


def new_index_uuid() -> bytes:
    return str(uuid.uuid4()).encode()


def read_index_uuid(storage) -> str | None:
    try:
        return read_text_verified(storage, f"{META_DIR}/{INDEX_UUID}").strip()
    except NotFound:
        return None
