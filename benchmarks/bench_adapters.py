"""Storage adapters on SeaweedFS S3: many small ranges and one large sequential read, vs plain s3fs / boto3.

- ranges: 1,000 random 4 KB ranges of a 256 MB object through `Storage.read_ranges`, vs a plain s3fs loop
  (`cat_file(path, start, end)` per range). Target >= 5x.
- sequential: the whole 256 MB object through `Storage.iter_chunks` (open_stream read in its 8 MB blocks), vs plain s3fs
  `open().read()` and boto3 `get_object()["Body"].read()`; the faster plain one is the reference. Target >= 0.9x.
"""

from __future__ import annotations

import statistics

import numpy as np

from benchmarks.harness import Comparison, timed
from energon_arrow.adapters import open_storage
from energon_arrow.adapters.ranges import coalesce_ranges
from energon_arrow.testing.seaweedfs import start_seaweedfs

RANGES = 1000
RANGE_SIZE = 4096


def _rotate(sides: dict, repeats: int) -> dict[str, list[float]]:
    """Run every side `repeats` times, rotating which goes first, so drift hits all sides alike."""
    names = list(sides)
    times: dict[str, list[float]] = {n: [] for n in names}
    for i in range(repeats):
        for k in range(len(names)):
            name = names[(i + k) % len(names)]
            times[name].append(sides[name]())
    return times


def run(args) -> list[Comparison]:
    import boto3
    import s3fs
    from botocore.config import Config

    size = (32 if args.quick else 256) << 20
    repeats = max(args.repeats, 1)
    server = start_seaweedfs()
    try:
        bucket = server.create_bucket("bench-adapters")
        plain = s3fs.S3FileSystem(
            endpoint_url=server.endpoint_url,
            key=server.storage_options["key"],
            secret=server.storage_options["secret"],
            skip_instance_cache=True,
        )
        boto = boto3.client(
            "s3",
            endpoint_url=server.endpoint_url,
            aws_access_key_id=server.storage_options["key"],
            aws_secret_access_key=server.storage_options["secret"],
            region_name="us-east-1",
            config=Config(max_pool_connections=32),
        )
        data = np.random.default_rng(0).bytes(size)
        plain.pipe_file(f"{bucket}/object.bin", data)
        store = open_storage(f"s3://{bucket}", server.storage_options)
        rng = np.random.default_rng(1)

        def offsets():
            return np.sort(
                rng.choice(size // RANGE_SIZE - 1, RANGES, replace=False)
            ) * RANGE_SIZE + rng.integers(0, RANGE_SIZE, RANGES)

        check = offsets()
        ours = store.read_ranges("object.bin", check, np.full(RANGES, RANGE_SIZE))
        assert all(bytes(v) == data[o : o + RANGE_SIZE] for v, o in zip(ours, check.tolist()))
        with store.open_stream("object.bin") as f:
            assert f.read() == data
        del data

        def ours_ranges():
            offs = rng.permutation(offsets())
            return timed(lambda: store.read_ranges("object.bin", offs, np.full(RANGES, RANGE_SIZE)))

        def plain_ranges():
            offs = rng.permutation(offsets()).tolist()
            path = f"{bucket}/object.bin"
            return timed(lambda: [plain.cat_file(path, start=o, end=o + RANGE_SIZE) for o in offs])

        def ours_stream():  # a stream is consumed in blocks (whole blocks are handed out without a copy)
            return timed(lambda: sum(len(chunk) for chunk in store.iter_chunks("object.bin")))

        def s3fs_read():
            def go():
                with plain.open(f"{bucket}/object.bin", "rb") as f:
                    return f.read()

            return timed(go)

        def boto_read():
            return timed(lambda: boto.get_object(Bucket=bucket, Key="object.bin")["Body"].read())

        ranges = _rotate({"ours": ours_ranges, "s3fs": plain_ranges}, repeats)
        plan = coalesce_ranges(check, np.full(RANGES, RANGE_SIZE), store.range_gap, store.max_fetch)
        gap = store.range_gap
        store.range_gap = 0  # for the record: the same reads without coalescing (concurrency only)
        uncoalesced = statistics.median(ours_ranges() for _ in range(repeats))
        store.range_gap = gap
        seq = _rotate({"ours": ours_stream, "s3fs": s3fs_read, "boto3": boto_read}, repeats)
        best = min(("s3fs", "boto3"), key=lambda k: statistics.median(seq[k]))
        mb = size / 1e6
        return [
            Comparison(
                f"{RANGES} random {RANGE_SIZE // 1024} KB ranges of a {size >> 20} MB object "
                "(read_ranges vs s3fs cat_file loop)",
                "s",
                ranges["ours"],
                ranges["s3fs"],
                target=5.0,
                notes={
                    "range_gap": gap,
                    "max_fetch": store.max_fetch,
                    "fetches": int(plan.starts.size),
                    "bytes_fetched": int((plan.ends - plan.starts).sum()),
                    "seconds_without_coalescing": uncoalesced,
                    "ratio_without_coalescing": statistics.median(ranges["s3fs"]) / uncoalesced,
                },
            ),
            Comparison(
                f"sequential {size >> 20} MB (open_stream vs best of s3fs open().read() / boto3 get_object)",
                "s",
                seq["ours"],
                seq[best],
                target=0.9,
                notes={
                    "reference": best,
                    "MB_per_s": {k: mb / statistics.median(v) for k, v in seq.items()},
                    "all_seconds": seq,
                },
            ),
        ]
    finally:
        server.stop()
