"""Nanoset vs Megatron-Core GPTDataset: index build (1 and 50 epochs; time and peak RSS, each run in a fresh
subprocess with an empty cache) and random sample loading (ours: get_batch of 32; Megatron: __getitem__).

Data: 1M documents / ~200M uint16 tokens, sequence length 2048 (--quick: 100k documents / 20M tokens), generated
under benchmarks/data/ with our TokenWriter.

`NANOSET_BENCH_PARTS=loading` (or `build`) runs only that part; the other part's rows are carried over from the
previous benchmarks/results/nanoset.json (their notes say so), so the results file keeps every row.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

from benchmarks.harness import Comparison, alternate, carried_rows, selected_parts

HERE = os.path.dirname(os.path.abspath(__file__))
SEQ = 2048

_CHILD = r"""
import json, resource, sys, time
import numpy as np
side, prefix, cache, epochs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
if side == "ours":
    from energon_arrow.tokens.nanoset import NanosetBuilder, NanosetConfig
    import fsspec  # noqa: F401  (imported lazily by the storage layer: keep module imports out of the timing)
    import torch  # noqa: F401  (same import baseline as the reference side)
    base = rss(); t = time.perf_counter()
    builder = NanosetBuilder(NanosetConfig([prefix], 2048, seed=1234, split="1", cache_dir=cache))
    tokens_per_epoch = builder.tokens[0].num_tokens  # the token files are opened once, as on Megatron's side
    n = None if epochs == 1 else (epochs * tokens_per_epoch - 1) // 2048
    ds = builder.build([n])[0]
else:
    import logging, warnings
    warnings.simplefilter("ignore"); logging.disable(logging.WARNING)
    from megatron.core.msc_utils import MultiStorageClientFeature
    MultiStorageClientFeature.disable()
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    from megatron.core.datasets.utils import Split
    from megatron.core.tokenizers.text.libraries.null_tokenizer import NullTokenizer
    base = rss(); t = time.perf_counter()
    low = IndexedDataset(prefix)
    tokens_per_epoch = int(low.sequence_lengths.sum(dtype=np.int64))
    n = None if epochs == 1 else (epochs * tokens_per_epoch - 1) // 2048
    cfg = GPTDatasetConfig(random_seed=1234, sequence_length=2048, blend=([prefix], None), split="1",
        path_to_cache=cache, tokenizer=NullTokenizer(vocab_size=50000), reset_position_ids=False,
        reset_attention_mask=False, eod_mask_loss=False)
    docs = np.arange(len(low.sequence_lengths), dtype=np.int32)
    ds = GPTDataset(low, prefix, docs, n, Split.train, cfg)
elapsed = time.perf_counter() - t
print(json.dumps({"seconds": elapsed, "peak": rss(), "base": base, "samples": len(ds)}))
"""


def make_data(quick: bool) -> str:
    from energon_arrow.tokens.builder import TokenWriter

    docs, tokens = (100_000, 20_000_000) if quick else (1_000_000, 200_000_000)
    folder = os.path.join(HERE, "data", "nanoset")
    prefix = os.path.join(folder, f"corpus_{docs}")
    if os.path.exists(prefix + ".idx"):
        return prefix
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 2 * tokens // docs, size=docs)
    with TokenWriter(prefix, dtype=np.uint16) as w:
        for a in range(0, docs, 100_000):
            part = lengths[a : a + 100_000]
            w.add_documents(rng.integers(0, 50_000, size=int(part.sum()), dtype=np.uint16), part)
        w.finalize()
    return prefix


def _child(side: str, prefix: str, epochs: int, record: list) -> float:
    cache = tempfile.mkdtemp(prefix="bench-nanoset-")
    try:
        env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE))
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, side, prefix, cache, str(epochs)],
            capture_output=True,
            text=True,
            check=True,
            env=env,
        ).stdout
        res = json.loads(out.strip().splitlines()[-1])
        record.append(res)
        return res["seconds"]
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def _build(prefix: str, epochs: int, repeats: int) -> list[Comparison]:
    ours_rec, ref_rec = [], []
    ours, ref = alternate(
        lambda: _child("ours", prefix, epochs, ours_rec),
        lambda: _child("megatron", prefix, epochs, ref_rec),
        repeats,
    )
    mib = 1 << 20
    ours_peak = [(r["peak"] - r["base"]) / mib for r in ours_rec]
    ref_peak = [(r["peak"] - r["base"]) / mib for r in ref_rec]
    notes = {
        "samples": ours_rec[0]["samples"],
        "peak_rss_total_mib": {
            "ours": max(r["peak"] for r in ours_rec) / mib,
            "megatron": max(r["peak"] for r in ref_rec) / mib,
        },
    }
    return [
        Comparison(f"index build, {epochs} epoch(s)", "s", ours, ref, target=2.0, notes=notes),
        Comparison(
            f"index build peak RSS growth, {epochs} epoch(s)",
            "s",
            ours_peak,
            ref_peak,
            target=1.0,
            notes={"unit": "MiB above the post-import baseline (lower is better)"},
        ),
    ]


def _loading(prefix: str, repeats: int, quick: bool) -> Comparison:
    import logging
    import warnings

    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    from energon_arrow.tokens.nanoset import NanosetBuilder, NanosetConfig
    from tests.conformance.nanoset_reference import megatron

    cache = tempfile.mkdtemp(prefix="bench-nanoset-load-")
    try:
        _, gpt, null_tokenizer = megatron()
        from megatron.core.datasets.indexed_dataset import IndexedDataset
        from megatron.core.datasets.utils import Split

        low = IndexedDataset(prefix)
        cfg = gpt.GPTDatasetConfig(
            random_seed=1234,
            sequence_length=SEQ,
            blend=([prefix], None),
            split="1",
            path_to_cache=os.path.join(cache, "m"),
            tokenizer=null_tokenizer(vocab_size=50000),
            reset_position_ids=False,
            reset_attention_mask=False,
            eod_mask_loss=False,
        )
        docs = np.arange(len(low.sequence_lengths), dtype=np.int32)
        ref = gpt.GPTDataset(low, prefix, docs, None, Split.train, cfg)

        def nanoset(mask: bool):
            config = NanosetConfig(
                [prefix],
                SEQ,
                seed=1234,
                split="1",
                create_attention_mask=mask,
                cache_dir=os.path.join(cache, "o"),
            )
            return NanosetBuilder(config).build([None])[0]

        ours, ours_masked = nanoset(False), nanoset(True)
        n = 2_000 if quick else 20_000
        rng = np.random.default_rng(0)

        def rate(ds) -> float:
            ks = rng.integers(0, len(ds), size=n)
            t = time.perf_counter()
            for a in range(0, n, 32):
                ds.get_batch(ks[a : a + 32])
            return n / (time.perf_counter() - t)

        def ours_rate() -> float:
            return rate(ours)

        def ref_rate() -> float:
            ks = rng.integers(0, len(ref), size=n // 4)
            t = time.perf_counter()
            for k in ks.tolist():
                ref[k]
            return ks.size / (time.perf_counter() - t)

        ref_rate()
        ours_rate()  # warm the page cache for both
        a, b = alternate(ours_rate, ref_rate, repeats)
        masked = [rate(ours_masked) for _ in range(repeats)]
        return Comparison(
            "random sample loading (ours get_batch(32) vs GPTDataset.__getitem__)",
            "samples/s",
            a,
            b,
            target=10.0,
            notes={
                "megatron": "create_attention_mask=True (its default)",
                "ours": "create_attention_mask=False",
                "ours_with_attention_mask_samples_per_s": masked,
            },
        )
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def _carried(loading: bool) -> list[Comparison]:
    """The previous results' rows of the part not run now (build rows, or the loading row)."""
    return carried_rows("nanoset", lambda name: name.startswith("random sample loading") == loading)


def run(args) -> list[Comparison]:
    parts = selected_parts("NANOSET_BENCH_PARTS", ("build", "loading"))
    prefix = make_data(args.quick)
    repeats = 1 if args.quick else args.repeats
    if "build" in parts:
        out = _build(prefix, 1, repeats) + _build(prefix, 50, repeats)
    else:
        out = _carried(loading=False)
    if "loading" in parts:
        out.append(_loading(prefix, repeats, args.quick))
    else:
        out += _carried(loading=True)
    return out
