"""Loader benchmarks, side by side with megatron-energon 7.4.1 on the same prepared dataset.

- full epoch, CaptioningSample field map, raw bytes (`decoder = None`), batch 32, 2 workers: samples/s;
- 10,000 random reads of one part by key: energon's WebdatasetFileStore vs energon-arrow's PartStore;
- peak RSS and peak private dirty memory per DataLoader worker of energon-arrow's loader, on the dataset and on
  one 10x larger (the index grows 10x).

Datasets (64 shards x 1,000 samples, and 640 x 1,000 for the RSS check) are generated under
`$EA_BENCH_DIR` (default /tmp/ea-bench-loader) and prepared with `energon prepare` once; --quick shrinks them.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import threading
import time

from benchmarks.harness import Comparison, alternate

BATCH, WORKERS = 32, 2


def _dataset(root: str, shards: int, per_shard: int) -> str:
    if os.path.exists(os.path.join(root, ".nv-meta", "index.sqlite")):
        return root
    from energon_arrow.testing.reference import energon_cli
    from energon_arrow.testing.synthetic import write_webdataset

    shutil.rmtree(root, ignore_errors=True)
    write_webdataset(root, shards=shards, samples_per_shard=per_shard, image_bytes=2048)
    energon_cli(
        "prepare",
        root,
        "--non-interactive",
        "--split-ratio",
        "1,0,0",
        "--no-progress",
        "--num-workers",
        "2",
        "--sample-type",
        "CaptioningSample",
        "--field-map",
        '{"image": "jpg", "caption": "txt"}',
    )
    from energon_arrow.query import open_dataset

    open_dataset(
        root, publish=True
    ).close()  # side index converted from index.sqlite and published once, outside the timing
    return root


def _train_dataset(api, root: str, repeat: bool, world_size: int = 1, per_sample: bool = False, **kw):
    """Raw-bytes training batches through `api` (energon_arrow or megatron.energon: the same names and
    arguments), with the benchmark's worker, batch and shuffle settings, as rank 0 of `world_size` (`kw`: more
    get_train_dataset args). `per_sample`: a task encoder with its own (identity) encode_sample, as most training
    setups have, so that every sample is built and encoded on its own."""

    class TE(api.DefaultTaskEncoder):
        decoder = None

    class PerSampleTE(TE):
        def encode_sample(self, sample):
            return sample

    return api.get_train_dataset(
        root,
        worker_config=api.WorkerConfig(rank=0, world_size=world_size, num_workers=WORKERS),
        batch_size=BATCH,
        shuffle_buffer_size=100,
        max_samples_per_sequence=100,
        task_encoder=PerSampleTE() if per_sample else TE(),
        repeat=repeat,
        **kw,
    )


def _epoch(api, root: str, per_sample: bool = False) -> float:
    t0 = time.perf_counter()
    n = sum(len(b.__key__) for b in api.get_loader(_train_dataset(api, root, False, per_sample=per_sample)))
    return n / (time.perf_counter() - t0)


def _epoch_ours(root: str, per_sample: bool = False) -> float:
    import energon_arrow

    return _epoch(energon_arrow, root, per_sample)


def _epoch_energon(root: str, per_sample: bool = False) -> float:
    import megatron.energon

    return _epoch(megatron.energon, root, per_sample)


def _keys(root: str, count: int) -> list[str]:
    from energon_arrow.query import open_dataset

    with open_dataset(root) as ds:
        keys = ds.sql("SELECT sample_key FROM samples").arrow()["sample_key"].to_pylist()
    rng = random.Random(1)
    return [f"{rng.choice(keys)}.jpg" for _ in range(count)]


def _random_ours(root: str, names: list[str]) -> float:
    from energon_arrow.loader.filestore import PartStore

    store = PartStore(root)
    store[names[0]]  # builds the name table (one-time setup, reported separately)
    t0 = time.perf_counter()
    for name in names:
        store[name]
    return time.perf_counter() - t0


def _random_energon(root: str, names: list[str]) -> float:
    from megatron.energon.cache.file_store import WebdatasetFileStore
    from megatron.energon.epathlib import EPath

    store = WebdatasetFileStore(EPath(root))
    store[names[0]]
    t0 = time.perf_counter()
    for name in names:
        store[name]
    return time.perf_counter() - t0


def _store_setup_ours(root: str) -> float:
    from energon_arrow.loader.filestore import PartStore

    t0 = time.perf_counter()
    PartStore(root)._row("000000_000000.jpg")
    return time.perf_counter() - t0


def _private_dirty(pid: int) -> int:
    """Bytes of anonymous memory only this process has written (its own heap plus parent pages it copied on
    write). File-backed pages (the page cache behind the memory-mapped index) are shared and not counted."""
    total, anonymous = 0, False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split(maxsplit=6)
            if "-" in head[0] and len(head) >= 5 and ":" in head[3]:  # a mapping header line
                name = head[5].strip() if len(head) > 5 else ""
                anonymous = name in ("", "[heap]", "[stack]") or name.startswith("[anon")
            elif anonymous and line.startswith("Private_Dirty:"):
                total += int(head[1]) * 1024
    return total


def _peak_worker_memory(root: str, batches: int) -> tuple[float, float]:
    """Peak RSS and peak private dirty memory, MiB, over the DataLoader workers while they load `batches`."""
    import psutil

    import energon_arrow as ea

    ds = _train_dataset(ea, root, repeat=True)
    peak, stop = {"rss": 0, "private": 0}, threading.Event()
    me = psutil.Process()

    def watch():
        while not stop.is_set():
            for child in me.children(recursive=True):
                with contextlib.suppress(psutil.Error, OSError):
                    peak["rss"] = max(peak["rss"], child.memory_info().rss)
                    peak["private"] = max(peak["private"], _private_dirty(child.pid))
            time.sleep(0.02)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    it = iter(ea.get_loader(ds))
    for _ in range(batches):
        next(it)
    it.close()
    stop.set()
    t.join()
    return peak["rss"] / 2**20, peak["private"] / 2**20


def _h2d_gbps(pinned_path: bool, batches: int = 200, mib: int = 64, warmup: int = 4) -> float:
    """Host-to-device GB/s in steady state: the loader's transfer stage on pageable batches, or a plain pinned
    `copy_`. Both sides allocate their pinned memory (the stage: its two rotating buffer sets, once per layout
    for the life of a loader) before the timing starts."""
    import torch

    from energon_arrow.loader.transfer import iter_to_device

    host = [{"x": torch.randint(0, 255, (mib << 20,), dtype=torch.uint8)} for _ in range(4)]
    if pinned_path:
        out = iter_to_device((host[i % 4] for i in range(warmup + batches)), "cuda")
        for _ in range(warmup):
            next(out)
    else:
        src = torch.empty(mib << 20, dtype=torch.uint8, pin_memory=True)
        dst = torch.empty(mib << 20, dtype=torch.uint8, device="cuda")
        for _ in range(warmup):
            dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    if pinned_path:
        for _b in out:
            pass
    else:
        for _ in range(batches):
            dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    return batches * (mib << 20) / (time.perf_counter() - t0) / 1e9


def run(args) -> list[Comparison]:
    base = os.environ.get("EA_BENCH_DIR", "/tmp/ea-bench-loader")
    shards, per_shard = (8, 250) if args.quick else (64, 1000)
    repeats = 1 if args.quick else args.repeats
    root = _dataset(f"{base}/ds-{shards}x{per_shard}", shards, per_shard)
    out = []

    ours, ref = alternate(lambda: _epoch_ours(root), lambda: _epoch_energon(root), repeats)
    out.append(
        Comparison(
            f"full epoch, {shards}x{per_shard}, raw bytes, batch {BATCH}, {WORKERS} workers",
            "samples/s",
            ours,
            ref,
            target=5.0,
        )
    )

    names = _keys(root, 1000 if args.quick else 10_000)
    ours, ref = alternate(lambda: _random_ours(root, names), lambda: _random_energon(root, names), repeats)
    setup = _store_setup_ours(root)
    out.append(
        Comparison(
            f"{len(names)} random part reads by key (PartStore vs WebdatasetFileStore)",
            "s",
            ours,
            ref,
            target=10.0,
            notes={"ours_one_time_setup_s": round(setup, 3)},
        )
    )

    big_shards = shards * 10
    big = _dataset(f"{base}/ds-{big_shards}x{per_shard}", big_shards, per_shard)
    import torch

    if torch.cuda.is_available():  # the pinned path vs a plain pinned copy_ of the same bytes (target 80%)
        ours, ref = alternate(lambda: _h2d_gbps(True), lambda: _h2d_gbps(False), repeats)
        out.append(
            Comparison("host-to-device, transfer stage vs plain pinned copy_", "GB/s", ours, ref, target=0.8)
        )

    n_batches = 200 if args.quick else 1000
    small = [_peak_worker_memory(root, n_batches) for _ in range(repeats)]
    large = [_peak_worker_memory(big, n_batches) for _ in range(repeats)]
    # "reference" column = the 10x larger dataset; ratio = small / large (1.0 = perfectly flat)
    label = f"{shards}x{per_shard} (ours column) vs {big_shards}x{per_shard} (reference column), energon-arrow both"
    note = {"meaning": "ratio = value on the dataset / value on the 10x dataset; 1.0 is flat"}
    out.append(
        Comparison(
            f"peak private anonymous memory per worker, MiB: {label}",
            "MiB/worker",
            [u for _, u in small],
            [u for _, u in large],
            target=0.9,
            notes=note,
        )
    )
    out.append(
        Comparison(
            f"peak RSS per worker, MiB: {label}",
            "MiB/worker",
            [r for r, _ in small],
            [r for r, _ in large],
            target=0.9,
            notes={
                **note,
                "why": "RSS also counts the shared page-cache pages of the memory-mapped "
                "index that a worker has touched (the kernel maps them in 2 MiB folios)",
            },
        )
    )
    # last: the memory rows above are measured in the process state they always were
    ours, ref = alternate(lambda: _epoch_ours(root, True), lambda: _epoch_energon(root, True), repeats)
    out.append(
        Comparison(
            f"full epoch, {shards}x{per_shard}, raw bytes, a task encoder with its own encode_sample (every sample "
            f"built on its own), batch {BATCH}, {WORKERS} workers",
            "samples/s",
            ours,
            ref,
            notes={"why": "no issue target; most training setups customise encode_sample"},
        )
    )

    return out
