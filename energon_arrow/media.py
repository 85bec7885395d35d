"""energon's `megatron.energon.media` names: `from energon_arrow.media import ImageMetadata, AVMetadata` (defined in
index/media_metadata.py with their stored JSON form; prepare writes them with `--media-metadata-by-...`
(index/media_prepare.py), the file stores read them with `get_media_metadata`)."""

from energon_arrow.index.media_metadata import (
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
