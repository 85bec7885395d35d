"""Which files are media and what their metadata is: energon's `MediaFilterConfig` (the three
`--media-metadata-by-...` strategies, energon's rules) and the readers behind it.

Images are read from their header only (Pillow's `Image.open` parses up to the size and mode; energon also decodes
the pixels, which gives the same values, so a truncated image body is not noticed here). Video and audio go
through `energon_arrow.av.AVDecoder.get_metadata(get_audio_num_samples=True)` like energon's (PyAV: the `av`
extra). Both read from a seekable stream, so only the bytes the parser asks for are read (`part_stream`).
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from fnmatch import translate
from typing import BinaryIO

from energon_arrow.index.media_metadata import ImageMetadata, MediaMetadataBase, MediaMetadataType

IMAGE_EXTENSIONS = frozenset(
    {"bmp", "gif", "ico", "j2k", "jp2", "jpx", "jpeg", "jpg", "png", "tif", "tiff", "webp"}
)
AV_EXTENSIONS = frozenset(
    {"aac", "avi", "flac", "m4a", "m4v", "mkv", "mov", "mp3", "mp4", "ogg", "wav", "webm"}
)
SIGNATURE_BYTES = 8192  # what `filetype.guess` looks at


class MediaError(ValueError):
    """A media file whose metadata cannot be read (named with its shard or folder and byte offset)."""


class MediaFilterStrategy(str, Enum):
    EXTENSION = "EXTENSION"  # by file extension
    HEADER = "HEADER"  # by the file type of the leading bytes (filetype), else by extension
    GLOB = "GLOB"  # by one or more glob patterns on the name (type by extension, else by header)


def type_from_extension(name: str) -> MediaMetadataType | None:
    """energon's rule: the suffix of the last path component (pathlib's), any case."""
    base = name.rsplit("/", 1)[-1]
    dot = base.rfind(".")
    suffix = base[dot + 1 :].lower() if 0 < dot < len(base) - 1 else ""
    if suffix in IMAGE_EXTENSIONS:
        return MediaMetadataType.IMAGE
    if suffix in AV_EXTENSIONS:
        return MediaMetadataType.AV
    return None


def type_from_header(head: bytes) -> MediaMetadataType | None:
    try:
        import filetype
    except ImportError:
        raise ImportError(
            "--media-metadata-by-header needs the filetype package: pip install 'energon-arrow[av]'"
        ) from None
    kind = filetype.guess(head[:SIGNATURE_BYTES])
    mime = None if kind is None else kind.mime
    if not mime:
        return None
    if mime.startswith("image/"):
        return MediaMetadataType.IMAGE
    if mime.startswith(("video/", "audio/")):
        return MediaMetadataType.AV
    return None


@dataclass(frozen=True)
class MediaFilterConfig:
    """How media files are found (energon's class of the same name, same rules)."""

    strategy: MediaFilterStrategy
    patterns: list[str] = field(default_factory=list)

    @classmethod
    def parse(cls, glob: str | None, header: bool, extension: bool) -> MediaFilterConfig:
        """From the three CLI options; exactly one must be given (ValueError otherwise, energon's message)."""
        if sum(bool(s) for s in (glob, header, extension)) != 1:
            raise ValueError(
                "Exactly one of GLOB, HEADER, or EXTENSION media filters must be enabled. "
                "You can use multiple glob patterns by separating them by commas."
            )
        if glob:
            return cls(MediaFilterStrategy.GLOB, glob.split(","))
        return cls(MediaFilterStrategy.HEADER if header else MediaFilterStrategy.EXTENSION)

    @property
    def stored_patterns(self) -> str:
        """The `patterns` column of `media_filters` (energon joins them with commas; "" for the other strategies)."""
        return ",".join(self.patterns)

    def should_consider_all(self) -> bool:
        """Whether every file must be read to know (HEADER)."""
        return self.strategy == MediaFilterStrategy.HEADER

    def _matchers(self) -> list[Callable]:
        return [re.compile(translate(p)).match for p in self.patterns]

    def name_filter(self) -> Callable[[str], bool]:
        """`name -> bool`: whether a name can be media without reading it (energon's two checks in one: GLOB
        patterns match the lower-cased name in the first and the name as it is in the second)."""
        if self.strategy == MediaFilterStrategy.HEADER:
            return lambda name: True
        if self.strategy == MediaFilterStrategy.EXTENSION:
            return lambda name: type_from_extension(name) is not None
        matchers = self._matchers()
        return lambda name: any(m(name.lower()) for m in matchers) and any(m(name) for m in matchers)

    def should_consider_media(self, name: str) -> bool:
        return self.name_filter()(name)

    def media_type(self, name: str, stream: BinaryIO) -> MediaMetadataType | None:
        """The media type of `name` (which passed `name_filter`); HEADER reads the leading bytes of `stream`."""
        if self.strategy == MediaFilterStrategy.EXTENSION:
            return type_from_extension(name)
        if self.strategy == MediaFilterStrategy.GLOB:
            # energon 7.4.1 fails here (an assertion) for every file a pattern matches: the type is taken from the
            # extension, else from the header
            by_name = type_from_extension(name)
            if by_name is not None:
                return by_name
        stream.seek(0)
        detected = type_from_header(stream.read(SIGNATURE_BYTES))
        return detected if detected is not None else type_from_extension(name)

    def extract(self, name: str, stream: BinaryIO) -> MediaMetadataBase | None:
        """The metadata of media file `name` read from `stream` (seekable), None when it is not media or its
        parser does not recognise it (energon's rules)."""
        kind = self.media_type(name, stream)
        if kind is None:
            return None
        stream.seek(0)
        return image_metadata(stream) if kind is MediaMetadataType.IMAGE else av_metadata(stream)

    def extract_metadata(self, source, filename: str | None = None) -> MediaMetadataBase | None:
        """energon's signature: `source` is bytes or a binary stream (with `filename`), or a local path."""
        if isinstance(source, (bytes, bytearray, memoryview)):
            return self.extract(filename, io.BytesIO(source))
        if hasattr(source, "read"):
            return self.extract(filename, source)
        path = os.fspath(source)
        if not self.name_filter()(os.path.basename(path)):
            return None
        with open(path, "rb") as f:
            return self.extract(os.path.basename(path), f)


def image_metadata(stream: BinaryIO) -> ImageMetadata | None:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(stream) as image:
            return ImageMetadata(
                width=image.width,
                height=image.height,
                format=image.format or "UNKNOWN",
                mode=image.mode or "UNKNOWN",
            )
    except UnidentifiedImageError:
        return None


def av_metadata(stream: BinaryIO) -> MediaMetadataBase | None:
    from energon_arrow.samples.av.container import require_av

    require_av()  # energon returns None for every file when PyAV is missing; here that is an error
    from energon_arrow.samples.av.decoder import AVDecoder

    try:
        return AVDecoder(stream).get_metadata(get_audio_num_samples=True)
    except Exception:  # energon: not readable by PyAV -> no metadata
        return None


class _Range(io.RawIOBase):
    """Bytes [offset, offset + size) of a file read through `pread(offset, n)`, seekable."""

    def __init__(self, pread: Callable[[int, int], bytes], offset: int, size: int):
        self._pread, self._offset, self._size, self._pos = pread, offset, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, pos: int, whence: int = 0) -> int:
        base = (0, self._pos, self._size)[whence]
        self._pos = max(0, base + pos)
        return self._pos

    def readinto(self, buf) -> int:
        n = min(len(buf), self._size - self._pos)
        if n <= 0:
            return 0
        data = self._pread(self._offset + self._pos, n)
        buf[: len(data)] = data
        self._pos += len(data)
        return len(data)


def part_stream(pread: Callable[[int, int], bytes], offset: int, size: int, buffer: int = 65536) -> BinaryIO:
    """A buffered, seekable stream over `size` bytes at `offset` of a file (`pread(offset, n) -> bytes`)."""
    return io.BufferedReader(_Range(pread, offset, size), buffer_size=min(buffer, max(size, 1)))
