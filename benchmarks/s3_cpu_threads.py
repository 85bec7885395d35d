"""Where an S3 epoch's extra CPU goes (issue 28): `python -m benchmarks.s3_cpu_threads` (after `python -m
benchmarks.run loader`, whose 64 x 1,000 dataset it reads). One local-disk and one s3:// epoch (SeaweedFS on
loopback) alternate 3 times after a warm-up, each timed from the loader's start (opening the dataset not counted,
as in bench_loader_s3); a thread samples /proc every 20 ms and keeps each thread's last CPU
time, so the workers' threads are counted before they exit. Printed: a Markdown table of CPU seconds per epoch
(medians) by process and thread kind (a worker's main thread assembles batches; its other threads are the fetch
pool and the DataLoader's result feeder), with the SeaweedFS server's own CPU in its own row.
"""

import collections
import os
import statistics
import threading
import time

import energon_arrow as ea
from benchmarks.bench_loader_s3 import _train_dataset, _upload, proc_cpu_s
from energon_arrow.testing.seaweedfs import start_seaweedfs

ROOT = os.path.join(os.environ.get("EA_BENCH_DIR", "/tmp/ea-bench-loader"), "ds-64x1000")


def threads_of(pid: int) -> dict[int, float]:
    """CPU seconds of each thread of `pid` so far (empty once it exited)."""
    out = {}
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            out[int(tid)] = proc_cpu_s(f"/proc/{pid}/task/{tid}/stat")
    except OSError:
        pass
    return out


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def epoch(url: str, opts: dict | None, server_pid: int) -> tuple[float, collections.Counter, float]:
    """(samples/s, CPU seconds by thread kind, the server's CPU seconds) of one epoch."""
    me = os.getpid()
    seen = {}  # (pid, tid) -> cpu
    stop = threading.Event()

    sampler = []

    def sample():
        sampler.append(threading.get_native_id())  # not counted: this thread's own CPU
        while not stop.is_set():
            for pid in [me] + [c for c in children(me) if c != server_pid]:
                for tid, cpu in threads_of(pid).items():
                    seen[(pid, tid)] = cpu
            time.sleep(0.02)

    ds = _train_dataset(ea, url, repeat=False, **({"storage_options": opts} if opts else {}))  # not counted
    base = dict(((me, tid), cpu) for tid, cpu in threads_of(me).items())
    srv0 = sum(threads_of(server_pid).values())
    t = threading.Thread(target=sample, daemon=True)
    t.start()
    t0 = time.perf_counter()
    n = sum(len(b.__key__) for b in ea.get_loader(ds))
    wall = time.perf_counter() - t0
    stop.set()
    t.join()
    srv = sum(threads_of(server_pid).values()) - srv0
    rows = collections.Counter()
    for (pid, tid), cpu in seen.items():
        if tid in sampler:
            continue
        cpu -= base.get((pid, tid), 0.0)
        if pid == me:
            rows["training process, main thread" if tid == me else "training process, other threads"] += cpu
        else:
            rows[
                "workers, main threads"
                if tid == pid
                else "workers, other threads (fetch pool, result feeder)"
            ] += cpu
    return n / wall, rows, srv


KINDS = [
    "training process, main thread",
    "training process, other threads",
    "workers, main threads",
    "workers, other threads (fetch pool, result feeder)",
]


def main() -> None:
    server = start_seaweedfs()
    try:
        bucket = server.create_bucket("cpu-threads")
        url = _upload(server, ROOT, bucket)
        sides = (("local", ROOT, None), ("s3", url, server.storage_options))
        for _, u, o in sides:
            epoch(u, o, server.process.pid)  # warm-up
        res: dict[str, list] = {"local": [], "s3": []}
        for _ in range(3):
            for name, u, o in sides:
                res[name].append(epoch(u, o, server.process.pid))
    finally:
        server.stop()
    print("| CPU seconds per epoch (median of 3) | local disk | s3:// | difference |")
    print("|---|---|---|---|")
    local_total = s3_total = 0.0
    for kind in KINDS:
        local = statistics.median(r[1][kind] for r in res["local"])
        s3 = statistics.median(r[1][kind] for r in res["s3"])
        local_total, s3_total = local_total + local, s3_total + s3
        print(f"| {kind} | {local:.2f} | {s3:.2f} | {s3 - local:+.2f} |")
    print(f"| loader total | {local_total:.2f} | {s3_total:.2f} | {s3_total - local_total:+.2f} |")
    print(f"| SeaweedFS server | - | {statistics.median(r[2] for r in res['s3']):.2f} | |")
    print("samples/s: local", [round(r[0]) for r in res["local"]], "s3", [round(r[0]) for r in res["s3"]])


if __name__ == "__main__":
    main()
