"""energon's `megatron.energon.media`: media metadata values and their stored JSON form (`metadata`), what prepare
extracts (`extract`: Pillow / PyAV, imported only when used) and where it is kept (`index`: index.sqlite's
`media_metadata` and `media_filters` tables)."""

from energon_arrow.media.metadata import (
    AVMetadata,
    ImageMetadata,
    MediaMetadataBase,
    MediaMetadataType,
    deserialize_media_metadata,
    serialize_media_metadata,
)

__all__ = [
    "AVMetadata",
    "ImageMetadata",
    "MediaMetadataBase",
    "MediaMetadataType",
    "deserialize_media_metadata",
    "serialize_media_metadata",
]
