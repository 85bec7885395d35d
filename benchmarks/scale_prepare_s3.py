"""Prepare at 10M samples / 10k shards on S3 (issue 16 item 3). Not a registered benchmark (10 GB of tar):
`python -m benchmarks.scale_prepare_s3 [--shards 10000] [--per-shard 1000]`.

Starts a SeaweedFS server (capacity for the data), PUTs the shards of `testing.tiny_shards` (1 KiB of tar per
sample) straight from memory, then runs `energon-arrow prepare s3://...` under `/usr/bin/time -v`: a fresh prepare
killed with SIGKILL after `--kill-after` seconds, the same command again (resumes the shards the killed run
indexed), `--force-overwrite` (every shard indexed again: a fresh prepare's work), and once more with nothing
changed (incremental). Prints wall time, samples/s, peak RSS and the summary's shard counts of each run.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import signal
import subprocess
import sys
import time


def _upload(server, bucket: str, prefix: str, shards: int, per_shard: int) -> float:
    from energon_arrow.testing.tiny_shards import _shard, _template

    template = _template(per_shard)
    local = __import__("threading").local()

    def put(s: int) -> None:
        if not hasattr(local, "client"):
            local.client = server.client()
        body = _shard(template, s)
        local.client.put_object(Bucket=bucket, Key=f"{prefix}/shards/shard-{s:06d}.tar", Body=body)

    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(put, range(shards)))
    return time.perf_counter() - t0


def _prepare(url: str, options: dict, *extra: str, kill_after: float | None = None) -> dict:
    cmd = [
        "/usr/bin/time", "-v", sys.executable, "-m", "energon_arrow", "prepare", url, "--non-interactive",
        "--split-ratio", "8,1,1", "--num-workers", "4", "--json", "--storage-options", json.dumps(options), *extra,
    ]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    if kill_after is not None:
        try:
            proc.wait(kill_after)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {"killed_after_s": round(time.perf_counter() - t0, 1)}
    out, err = proc.communicate()
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise RuntimeError(f"prepare failed ({proc.returncode}): {err[-2000:]}")
    summary = json.loads(out)
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", err).group(1))
    return {
        "wall_s": round(wall, 1),
        "samples_per_s": round(summary["samples"] / wall),
        "peak_rss_mb": round(rss / 1024),
        **{k: summary.get(k) for k in ("shards", "samples", "indexed", "reused", "resumed")},
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shards", type=int, default=10_000)
    parser.add_argument("--per-shard", type=int, default=1_000)
    parser.add_argument("--kill-after", type=float, default=60.0)
    args = parser.parse_args(argv)
    from energon_arrow.testing.seaweedfs import start_seaweedfs

    gib = args.shards * args.per_shard * 1024 / 2**30
    server = start_seaweedfs(max_volumes=max(16, int(gib * 3 * 1024 / 256) + 8))
    try:
        bucket = server.create_bucket("scale")
        url = f"s3://{bucket}/ds"
        print(f"uploading {args.shards} shards x {args.per_shard} samples ({gib:.2f} GiB)", flush=True)
        print(f"  upload: {_upload(server, bucket, 'ds', args.shards, args.per_shard):.0f} s", flush=True)
        opts = server.storage_options
        runs = [
            ("killed", lambda: _prepare(url, opts, kill_after=args.kill_after)),
            ("resumed", lambda: _prepare(url, opts)),
            ("force-overwrite", lambda: _prepare(url, opts, "--force-overwrite")),
            ("unchanged", lambda: _prepare(url, opts)),
        ]
        for name, run in runs:
            print(f"{name}: {run()}  (load {os.getloadavg()[0]:.1f})", flush=True)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
