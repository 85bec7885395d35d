"""energon's `megatron.energon.media`: media metadata values and their stored JSON form (`metadata`), what prepare
extracts (`extract`: Pillow / PyAV, imported only when used) and where it is kept (`index`: index.sqlite's
`media_metadata` and `media_filters` tables). The names load on first use, so that prepare's check for a previous
index's media tables (`index`) imports nothing else."""

__all__ = [
    "AVMetadata",
    "ImageMetadata",
    "MediaMetadataBase",
    "MediaMetadataType",
    "deserialize_media_metadata",
    "serialize_media_metadata",
]


def __getattr__(name):
    if name in __all__:
        from energon_arrow.media import metadata

        return getattr(metadata, name)
    raise AttributeError(f"module 'energon_arrow.media' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *__all__])
