"""energon's media metadata, side by side with energon 7.4.1, both CLIs end to end, alternating:

- `prepare DIR --media-metadata-by-extension` (the whole prepare plus the media tables: every image's header read)
  vs `energon prepare` with the same option, `--num-workers 2` and `--force-overwrite` on both (nothing is carried
  over from the previous run);
- `prepare-media FOLDER --media-metadata-by-extension` on a plain folder of the same images vs `energon
  prepare-media`, `--num-workers 2` on both.

Data: 8 shards x 250 JPEGs of 64-1024 px (Pillow, quality 90) with a caption each, generated once under
`$EA_BENCH_DIR` (default /tmp/ea-bench-media); the folder holds the same JPEGs as files. Both sides must write the
same number of media rows. No target: media metadata came with the drop-in work, not with an issue's ratio.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import sys
import tarfile

from benchmarks.harness import Comparison, alternate, timed_command
from energon_arrow.testing.reference import energon_command

BY_EXTENSION = "--media-metadata-by-extension"


def _data(quick: bool) -> tuple[str, str, str, str, int]:
    """(our WebDataset, energon's (hard links to the same shards), our folder, energon's folder, images)."""
    from energon_arrow.testing.images import write_image_webdataset

    shards, per_shard = (2, 50) if quick else (8, 250)
    base = os.path.join(os.environ.get("EA_BENCH_DIR", "/tmp/ea-bench-media"), f"{shards}x{per_shard}")
    paths = [os.path.join(base, n) for n in ("wds-ours", "wds-energon", "folder-ours", "folder-energon")]
    if not os.path.isdir(os.path.join(paths[3], "images")):
        shutil.rmtree(base, ignore_errors=True)
        write_image_webdataset(paths[0], shards, per_shard, size=(64, 1024), varied=True, quality=90)
        tars = sorted(
            os.path.relpath(os.path.join(d, f), paths[0])
            for d, _, files in os.walk(paths[0])
            for f in files
            if f.endswith(".tar")
        )
        for rel in tars:
            os.makedirs(os.path.dirname(os.path.join(paths[1], rel)), exist_ok=True)
            os.link(os.path.join(paths[0], rel), os.path.join(paths[1], rel))
            with tarfile.open(os.path.join(paths[0], rel)) as tar:
                for member in tar:
                    if member.name.endswith(".jpg"):
                        data = tar.extractfile(member).read()
                        for folder in paths[2:]:
                            os.makedirs(os.path.join(folder, "images"), exist_ok=True)
                            with open(
                                os.path.join(folder, "images", os.path.basename(member.name)), "wb"
                            ) as f:
                                f.write(data)
    return *paths, shards * per_shard


def _media_rows(root: str) -> int:
    with contextlib.closing(sqlite3.connect(os.path.join(root, ".nv-meta", "index.sqlite"))) as db:
        return db.execute("SELECT count(*) FROM media_metadata").fetchone()[0]


def run(args) -> list[Comparison]:
    wds_ours, wds_ref, folder_ours, folder_ref, images = _data(args.quick)
    repeats = 1 if args.quick else args.repeats
    # --force-overwrite: every run does the whole work (energon's refuses a prepared dataset without it)
    prep = ["--non-interactive", "--split-ratio", "1,0,0", "--no-progress", "--num-workers", "2"]
    prep += [BY_EXTENSION, "--force-overwrite"]
    ours_cmd = [sys.executable, "-m", "energon_arrow", "prepare", wds_ours, *prep]
    ref_cmd = [*energon_command(), "prepare", wds_ref, *prep]
    ours, ref = alternate(lambda: timed_command(ours_cmd), lambda: timed_command(ref_cmd), repeats)
    rows = (_media_rows(wds_ours), _media_rows(wds_ref))
    if rows != (images, images):
        raise RuntimeError(f"media rows (ours, energon's) {rows}, expected {images} each")
    media = ["--no-progress", "--num-workers", "2", BY_EXTENSION]
    f_ours, f_ref = alternate(
        lambda: timed_command([sys.executable, "-m", "energon_arrow", "prepare-media", folder_ours, *media]),
        lambda: timed_command([*energon_command(), "prepare-media", folder_ref, *media]),
        repeats,
    )
    folder_rows = (_media_rows(folder_ours), _media_rows(folder_ref))
    if folder_rows != (images, images):
        raise RuntimeError(f"prepare-media rows (ours, energon's) {folder_rows}, expected {images} each")
    setup = f"{images} JPEGs of 64-1024 px, --num-workers 2, CLIs end to end"
    return [
        Comparison(f"prepare --media-metadata-by-extension, {setup}", "s", ours, ref),
        Comparison(f"prepare-media --media-metadata-by-extension on a folder, {setup}", "s", f_ours, f_ref),
    ]
