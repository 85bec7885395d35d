"""An object's bytes checked against its S3 ETag, where the ETag is made of MD5s.

- An object uploaded in one PUT (no SSE-KMS): the ETag is the MD5 of its bytes.
- An object uploaded in N parts: `<MD5 of the concatenated binary MD5s of the parts>-N`. The part size is not
  recorded, so the check tries the part sizes uploaders use (AWS CLI / boto3 8 MiB, the 5 MiB minimum, s3fs 50 MiB,
  energon-arrow's own 16 MiB and a few more: COMMON_PART_SIZES) that give exactly N parts for the object's size;
  an object uploaded with another part size cannot be checked (`EtagMd5.checkable` False when no tried size gives N
  parts; where one does but the upload used another, no read matches: callers take bytes that two reads agree on
  as such an object's, `stable`).

`EtagMd5(etag, size)` is fed the object's bytes in order, in pieces of any size (`update`); `matches()` says
whether they are the bytes the store recorded. Each candidate part size costs one MD5 pass (hashlib, the GIL
released; ~0.7 GB/s per core); the sizes that fit N parts for a given size are usually one.
"""

from __future__ import annotations

import hashlib
import re

_PLAIN = re.compile(r"[0-9a-f]{32}")
_MULTIPART = re.compile(r"([0-9a-f]{32})-([0-9]+)")
MIB = 1 << 20
COMMON_PART_SIZES = tuple(m * MIB for m in (5, 8, 10, 15, 16, 25, 32, 50, 64, 100, 128, 256, 512))


class _Parts:
    """The multipart ETag of a stream for one part size."""

    def __init__(self, part: int):
        self.part, self.done, self.left = part, hashlib.md5(usedforsecurity=False), part
        self.current = hashlib.md5(usedforsecurity=False)

    def update(self, view: memoryview) -> None:
        while len(view):
            take = min(self.left, len(view))
            self.current.update(view[:take])
            view, self.left = view[take:], self.left - take
            if not self.left:
                self._close_part()

    def _close_part(self) -> None:
        self.done.update(self.current.digest())
        self.current, self.left = hashlib.md5(usedforsecurity=False), self.part

    def hexdigest(self) -> str:
        done = self.done.copy()
        if self.left != self.part:  # the last, shorter part
            done.update(self.current.digest())
        return done.hexdigest()


class EtagMd5:
    def __init__(self, etag: str | None, size: int):
        etag = (etag or "").strip('"').lower()
        self.etag, self.size, self.fed = etag, size, 0
        self._plain = hashlib.md5(usedforsecurity=False) if _PLAIN.fullmatch(etag) else None
        self._parts: list[_Parts] = []
        multipart = _MULTIPART.fullmatch(etag)
        if multipart is not None:
            n = int(multipart.group(2))
            self._parts = [_Parts(p) for p in COMMON_PART_SIZES if n >= 1 and -(-size // p) == n]

    @property
    def multipart(self) -> bool:
        return self._plain is None

    @property
    def checkable(self) -> bool:
        """Whether the ETag can tell these bytes from others (an MD5, or parts of a size tried)."""
        return self._plain is not None or bool(self._parts)

    def update(self, data) -> None:
        with memoryview(data) as raw, raw.cast("B") as view:
            self.fed += len(view)
            if self._plain is not None:
                self._plain.update(view)
            for parts in self._parts:
                parts.update(view)

    def got(self) -> str:
        """What the bytes fed give, in the ETag's form (the first candidate's for a multipart one)."""
        if self._plain is not None:
            return self._plain.hexdigest()
        n = self.etag.rsplit("-", 1)[-1]
        return f"{self._parts[0].hexdigest()}-{n}" if self._parts else "?"

    def stable(self, earlier: str | None) -> bool:
        """For a multipart ETag none of whose tried part sizes matched: whether these bytes equal an earlier read's
        (`earlier`: its `got()`), i.e. the upload's part size was another, not the bytes damaged."""
        return self.multipart and earlier is not None and self.got() == earlier

    def matches(self) -> bool:
        """Whether exactly `size` bytes were fed and they are the object's recorded content."""
        if self.fed != self.size or not self.checkable:
            return False
        if self._plain is not None:
            return self._plain.hexdigest() == self.etag
        want = self.etag.split("-", 1)[0]
        return any(parts.hexdigest() == want for parts in self._parts)
