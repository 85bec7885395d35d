"""`TarFormatError`: a shard that cannot be indexed, named with the member and byte offset."""

from __future__ import annotations


class TarFormatError(ValueError):
    """A tar shard is malformed (empty, truncated, not a tar, compressed, keys out of order, ...).

    Attributes: `shard` (URL or path), `member` (member name or None), `offset` (byte offset or None),
    `reason` (the message without the location).
    """

    def __init__(self, shard: str, reason: str, member: str | None = None, offset: int | None = None):
        where = shard
        if member is not None:
            where += f": member {member!r}"
        if offset is not None:
            where += f" at byte offset {offset}"
        super().__init__(f"{where}: {reason}")
        self.shard = shard
        self.member = member
        self.offset = offset
        self.reason = reason

    def __reduce__(self):
        return (TarFormatError, (self.shard, self.reason, self.member, self.offset))
