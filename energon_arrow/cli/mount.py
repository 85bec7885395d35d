"""`energon-arrow mount`: energon's command mounts a prepared dataset as a read-only FUSE filesystem. energon-arrow
has no FUSE layer; the command refuses with the reason and the alternatives (docs/cli.md) instead of accepting
energon's arguments and doing something else."""

from __future__ import annotations

from energon_arrow.cli.common import not_provided

REASON = (
    "mount is not provided: energon-arrow has no FUSE filesystem. List and read a prepared dataset's files with "
    '`energon-arrow query DATASET "SELECT sample_key, part_name, content_size FROM sample_parts"` and `energon-arrow '
    "preview DATASET`, or use energon's own `energon mount`, which works on datasets energon-arrow prepared "
    "(they carry energon's index.sqlite unless prepared with --no-energon-index); see docs/cli.md#energon-arrow-mount"
)


command = not_provided(
    "mount",
    REASON,
    """Not provided: energon-arrow has no FUSE filesystem (see `query` and `preview`, or energon's `energon mount`
    on the same dataset); prints why and exits 1 whatever energon arguments it gets.""",
)
