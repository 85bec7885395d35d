"""GPU image loading (issue 14), `python -m benchmarks.run images_gpu`: runs only with CUDA, prints "not
measured: no GPU" otherwise. Data: the 384x384 set of benchmarks/bench_images.py (16 shards x 500 JPEGs), prepared
by energon-arrow when megatron-energon is not installed (a GPU machine needs neither energon nor DuckDB for this).

- compressed-bytes GPU decode: images/s of torchvision's batched `decode_jpeg(list, device="cuda")` (nvjpeg) on
  the benchmark's JPEGs, batches of BATCH, against the CPU decode limit (WORKERS x one core's Pillow rate);
- the loader end to end on the GPU: `Loader(device="cuda")` epochs with `image_device_decode=True` against the
  workers' uint8 decode copied to the GPU (both uint8 CHW, samples/s);
- host-to-device of uint8 batches: the loader's transfer stage (`DeviceTransfer`: pinned staging + async copy)
  on a batch in shared memory like a batch slot, against a plain pinned `copy_` of the same bytes (GB/s; target
  80%).
"""

from __future__ import annotations

import time

from benchmarks.harness import Comparison, alternate


def _sync_rate(fn, units: float, rounds: int) -> float:
    import torch

    fn()  # warm-up (nvjpeg handles, allocator, pinned buffers)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(rounds):
        fn()
    torch.cuda.synchronize()
    return units * rounds / (time.perf_counter() - t0)


def _decode_rate(payloads: list[bytes], batch: int) -> float:
    import torch
    from torchvision.io import decode_jpeg

    tensors = [torch.frombuffer(bytearray(p), dtype=torch.uint8) for p in payloads]
    groups = [tensors[i : i + batch] for i in range(0, len(tensors) - batch + 1, batch)]

    def run():
        for g in groups:
            decode_jpeg(g, mode="RGB", device="cuda")

    return _sync_rate(run, batch * len(groups), 1)


def _loader_epoch(root: str, batch: int, workers: int, **decoder) -> float:
    import energon_arrow as ea
    from energon_arrow.loader.loader import Loader

    te = ea.DefaultTaskEncoder()
    te.decoder = ea.SampleDecoder(image_decode="torchrgb8", **decoder)
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=workers)
    ds = ea.get_train_dataset(
        root,
        worker_config=wc,
        batch_size=batch,
        shuffle_buffer_size=100,
        max_samples_per_sequence=100,
        task_encoder=te,
        repeat=False,
    )
    import torch

    t0 = time.perf_counter()
    n = 0
    for b in Loader(ds, num_workers=workers, device="cuda"):
        n += len(b.__key__)
    torch.cuda.synchronize()
    return n / (time.perf_counter() - t0)


def _h2d_rates(batch: int, rounds: int = 50) -> tuple[float, float]:
    """(GB/s of the transfer stage, GB/s of a plain pinned copy_) for one uint8 image batch."""
    import torch

    from energon_arrow.loader.transfer import DeviceTransfer

    shape = (batch, 3, 384, 384)
    host = torch.randint(0, 256, shape, dtype=torch.uint8).share_memory_()  # like a batch slot
    gb = host.numel() / 1e9
    transfer = DeviceTransfer("cuda")
    pinned = host.clone().pin_memory()
    dev = torch.empty(shape, dtype=torch.uint8, device="cuda")
    stage = _sync_rate(lambda: transfer({"image": host}), gb, rounds)
    plain = _sync_rate(lambda: dev.copy_(pinned, non_blocking=True), gb, rounds)
    return stage, plain


def run(args) -> list[Comparison]:
    """The GPU rows (an empty list, after saying why, without CUDA or torchvision)."""
    import importlib.util

    import torch

    from benchmarks.bench_images import BATCH, WORKERS, benchmark_payloads, decode_limit, fixed_dataset

    if not torch.cuda.is_available():
        print("GPU section: not measured: no GPU")
        return []
    repeats = 1 if args.quick else args.repeats
    by_energon = importlib.util.find_spec("megatron") is not None
    root, _, _ = fixed_dataset(args.quick, by_energon)
    payloads = benchmark_payloads(root, args.quick)
    return _comparisons(root, payloads, lambda: decode_limit(payloads), BATCH, WORKERS, repeats)


def _comparisons(root: str, payloads: list[bytes], decode_limit, batch: int, workers: int, repeats: int):
    import torch

    out = []
    stage, plain = alternate(lambda: _h2d_rates(batch)[0], lambda: _h2d_rates(batch)[1], repeats)
    out.append(
        Comparison(
            f"host-to-device of uint8 batches {batch}x3x384x384 (transfer stage vs plain pinned copy_)",
            "GB/s",
            stage,
            plain,
            target=0.8,
        )
    )
    try:
        from energon_arrow.images.jpeg_bytes import batched_jpeg_decoder

        batched_jpeg_decoder()
    except ImportError as exc:
        print(f"GPU decode: not measured: {exc}")
        return out
    gpu, limit = alternate(lambda: _decode_rate(payloads, batch), decode_limit, repeats)
    out.append(
        Comparison(
            f"compressed-bytes GPU decode (decode_jpeg on cuda, batches of {batch}) vs the CPU decode limit "
            f"({workers} x one core's Pillow rate)",
            "images/s",
            gpu,
            limit,
            notes={"device": torch.cuda.get_device_name()},
        )
    )
    ours, ref = alternate(
        lambda: _loader_epoch(root, batch, workers, image_device_decode=True),
        lambda: _loader_epoch(root, batch, workers),
        repeats,
    )
    out.append(
        Comparison(
            f"Loader(device='cuda') uint8: image_device_decode vs the workers' decode, batch {batch}, "
            f"{workers} workers",
            "samples/s",
            ours,
            ref,
            notes={"device": torch.cuda.get_device_name()},
        )
    )
    return out
