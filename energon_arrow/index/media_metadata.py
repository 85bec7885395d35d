"""energon's media metadata values (`megatron.energon.media`): `AVMetadata` (video / audio streams),
`ImageMetadata` (an encoded image's size, format and mode), their base `MediaMetadataBase` and the
`MediaMetadataType` stored beside them, and the JSON form energon keeps in index.sqlite's `media_metadata` table
(`serialize_media_metadata` / `deserialize_media_metadata`: the same strings as energon's, so either reads the
other's). Light: no torch, Pillow or PyAV import."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from enum import Enum
from typing import Any, ClassVar, TypeVar

from typing_extensions import dataclass_transform


@dataclass_transform(kw_only_default=True)
def _edataclass(cls):
    # energon's edataclass (samples.sample's imports torch, which this module must not)
    return dataclasses.dataclass(kw_only=True, slots=True)(cls)


class MediaMetadataType(str, Enum):
    """The kinds of media metadata (the `metadata_type` column)."""

    AV = "av"
    IMAGE = "image"

    @classmethod
    def from_string(cls, value: str) -> MediaMetadataType:
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"Unsupported media metadata type: {value!r}") from None


TMetadata = TypeVar("TMetadata", bound="MediaMetadataBase")


@_edataclass
class MediaMetadataBase:
    """Base of the metadata values: a typed JSON object."""

    metadata_type: ClassVar[MediaMetadataType]

    def to_dict(self) -> dict[str, Any]:
        """The fields that are set (not None), in field order: the JSON object energon stores."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls: type[TMetadata], payload: Mapping[str, Any]) -> TMetadata:
        return cls(**payload)


@_edataclass
class AVMetadata(MediaMetadataBase):
    """Metadata of a video or audio file (None where not known or not requested)."""

    metadata_type: ClassVar[MediaMetadataType] = MediaMetadataType.AV

    video_duration: float | None = None
    video_num_frames: int | None = None
    video_fps: float | None = None
    video_width: int | None = None
    video_height: int | None = None

    audio_duration: float | None = None
    audio_channels: int | None = None
    audio_sample_rate: int | None = None
    audio_num_samples: int | None = None


@_edataclass
class ImageMetadata(MediaMetadataBase):
    """Metadata of an encoded image: Pillow's size, format name ("JPEG", "PNG", ...) and mode ("RGB", ...)."""

    metadata_type: ClassVar[MediaMetadataType] = MediaMetadataType.IMAGE

    width: int
    height: int
    format: str
    mode: str


_TYPES: dict[MediaMetadataType, type[MediaMetadataBase]] = {
    MediaMetadataType.AV: AVMetadata,
    MediaMetadataType.IMAGE: ImageMetadata,
}


def serialize_media_metadata(metadata: MediaMetadataBase) -> tuple[MediaMetadataType, str]:
    """`(type, compact JSON)`: energon's stored form."""
    return metadata.metadata_type, json.dumps(metadata.to_dict(), separators=(",", ":"))


def deserialize_media_metadata(
    metadata_type: str | MediaMetadataType, metadata_json: str
) -> MediaMetadataBase:
    """The value of a stored `(metadata_type, metadata_json)` row."""
    if not isinstance(metadata_type, MediaMetadataType):
        metadata_type = MediaMetadataType.from_string(metadata_type)
    return _TYPES[metadata_type].from_dict(json.loads(metadata_json) if metadata_json else {})
