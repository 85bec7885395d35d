"""GPU image loading (issue 14), `python -m benchmarks.run images_gpu`: runs only with CUDA, prints "not
measured: no GPU" otherwise. Data: the 384x384 set of benchmarks/bench_images.py (16 shards x 500 JPEGs), prepared
by energon-arrow when megatron-energon is not installed (a GPU machine needs neither energon nor DuckDB for this).

- compressed-bytes GPU decode: images/s of torchvision's batched `decode_jpeg(list, device="cuda")` (nvjpeg) on
  the benchmark's JPEGs, batches of BATCH, against the CPU decode limit (WORKERS x one core's Pillow rate);
- the loader end to end on the GPU: `Loader(device="cuda")` with `image_device_decode=True` against the workers'
  uint8 decode copied to the GPU (both uint8 CHW, samples/s, WORKERS workers each), and with GPU_WORKERS workers
  against the nvjpeg-only rate above (target 0.6: nvjpeg is the bottleneck). Loader rates are steady state:
  LOADER_SAMPLES samples of an endless (repeat=True) loader timed from its first batch; the time to that first
  batch (worker start) is printed beside them;
- host-to-device of uint8 image batches: the loader's transfer stage (`DeviceTransfer`) on batches in recycled
  shared-memory slots registered in place by their board (images/slots.py), against a plain pinned `copy_` of the
  same bytes (GB/s; target 0.8). The registration (once per slot) happens in the warm-up and is printed; the
  stage on an unregistered shared-memory batch (a staging copy first) is printed for comparison.
"""

from __future__ import annotations

import collections
import dataclasses
import time

from benchmarks.harness import Comparison, alternate

GPU_WORKERS = 4  # workers feeding nvjpeg (the GPU machines lent here have 16 cores)
LOADER_SAMPLES = 32_000  # samples per steady-state loader measurement (4 passes over the 8,000 images)


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


def _loader_rate(root: str, batch: int, workers: int, samples: int, **decoder) -> float:
    """Steady-state samples/s of `Loader(device="cuda")`: `samples` samples of an endless loader, timed from its
    first batch (the time to the first batch is printed)."""
    import torch

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
        repeat=True,
    )
    t0 = time.perf_counter()
    n, first = 0, None
    for b in Loader(ds, num_workers=workers, device="cuda"):
        if first is None:
            torch.cuda.synchronize()
            first = time.perf_counter()
        else:
            n += len(b.__key__)
        if n >= samples:
            break
    torch.cuda.synchronize()
    rate = n / (time.perf_counter() - first)
    mode = "device decode" if decoder else "workers' decode"
    print(
        f"  loader {mode}, {workers} workers: first batch after {first - t0:.2f} s, then {rate:,.0f} samples/s"
    )
    return rate


def _slot_stage_rate(batch: int, rounds: int = 50) -> float:
    """GB/s of the transfer stage on uint8 image batches in registered shared-memory slots, as the loader's main
    process receives them (a board with 4 slots, the batch dropped after its transfer like a consumed one)."""
    import torch

    from energon_arrow.images.slots import SlotAllocator, SlotBoard
    from energon_arrow.loader.transfer import DeviceTransfer

    shape = (batch, 3, 384, 384)
    device = torch.device("cuda", torch.cuda.current_device())
    board = SlotBoard(1, 4, pin_device=device)
    alloc = SlotAllocator(board, 0)
    transfer = DeviceTransfer(device, depth=1)
    source = torch.randint(0, 256, shape, dtype=torch.uint8)

    @dataclasses.dataclass
    class Batch:
        image: torch.Tensor

    copies: collections.deque = collections.deque()
    filled: set[int] = set()  # each slot filled once (outside the copy being measured)

    def one():
        s = alloc.next % board.slots
        while copies and alloc.uses[s] >= 0 and int(board.released[0, s]) < alloc.uses[s]:  # DMA-bound:
            copies.popleft().synchronize()  # wait for the oldest copy, as a worker waits for its slot
            transfer.release_finished()
            board.release_dropped()
        image = alloc.tensor(shape, torch.uint8, "image")
        if image.untyped_storage().data_ptr() not in filled:
            image.copy_(source)
            filled.add(image.untyped_storage().data_ptr())
        b = Batch(image)
        board.hold(b, alloc.take())
        transfer(b)
        copies.append(torch.cuda.current_stream().record_event())

    t0 = time.perf_counter()
    for _ in range(board.slots):
        one()
    torch.cuda.synchronize()
    print(
        f"  slot registration + first fill: {(time.perf_counter() - t0) / board.slots * 1e3:.1f} ms per slot"
    )
    rate = _sync_rate(one, source.numel() / 1e9, rounds)
    board.clear()
    return rate


def _h2d_rates(batch: int, rounds: int = 50) -> tuple[float, float]:
    """(GB/s of the transfer stage from registered slots, GB/s of a plain pinned copy_) for one uint8 batch; the
    stage on an unregistered shared-memory batch is printed."""
    import torch

    from energon_arrow.loader.transfer import DeviceTransfer

    shape = (batch, 3, 384, 384)
    host = torch.randint(0, 256, shape, dtype=torch.uint8).share_memory_()
    gb = host.numel() / 1e9
    staging = DeviceTransfer("cuda")
    staged = _sync_rate(lambda: staging({"image": host}), gb, rounds // 5)
    stage = _slot_stage_rate(batch, rounds)
    pinned = host.clone().pin_memory()
    dev = torch.empty(shape, dtype=torch.uint8, device="cuda")
    plain = _sync_rate(lambda: dev.copy_(pinned, non_blocking=True), gb, rounds)
    print(
        f"  stage from registered slots {stage:.1f} GB/s, unregistered (staged) {staged:.1f}, plain {plain:.1f}"
    )
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
    rates = [_h2d_rates(batch) for _ in range(repeats)]
    out.append(
        Comparison(
            f"host-to-device of uint8 batches {batch}x3x384x384 (transfer stage from registered batch slots vs "
            "plain pinned copy_)",
            "GB/s",
            [r[0] for r in rates],
            [r[1] for r in rates],
            target=0.8,
        )
    )
    try:
        from energon_arrow.images.jpeg_bytes import batched_jpeg_decoder

        batched_jpeg_decoder()
    except ImportError as exc:
        print(f"GPU decode: not measured: {exc}")
        return out
    device = {"device": torch.cuda.get_device_name()}
    gpu, limit = alternate(lambda: _decode_rate(payloads, batch), decode_limit, repeats)
    out.append(
        Comparison(
            f"compressed-bytes GPU decode (decode_jpeg on cuda, batches of {batch}) vs the CPU decode limit "
            f"({workers} x one core's Pillow rate)",
            "images/s",
            gpu,
            limit,
            notes=device,
        )
    )
    print(f"  nvjpeg in calls of {4 * batch}: {_decode_rate(payloads, 4 * batch):,.0f} images/s")
    ours, ref = alternate(
        lambda: _loader_rate(root, batch, workers, LOADER_SAMPLES // 4, image_device_decode=True),
        lambda: _loader_rate(root, batch, workers, LOADER_SAMPLES // 4),
        repeats,
    )
    out.append(
        Comparison(
            f"Loader(device='cuda') uint8 steady state: image_device_decode vs the workers' decode, batch {batch}, "
            f"{workers} workers",
            "samples/s",
            ours,
            ref,
            notes=device,
        )
    )
    fed = [
        _loader_rate(root, batch, GPU_WORKERS, LOADER_SAMPLES, image_device_decode=True)
        for _ in range(repeats)
    ]
    out.append(
        Comparison(
            f"Loader(device='cuda') uint8 steady state with image_device_decode, batch {batch}, {GPU_WORKERS} workers, "
            f"vs nvjpeg alone (decode_jpeg on the same bytes, batches of {batch})",
            "samples/s",
            fed,
            gpu,
            target=0.6,
            notes=device,
        )
    )
    return out
