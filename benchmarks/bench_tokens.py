"""Token datasets vs megatron-core, side by side (megatron's multistorageclient routing disabled).

- write: 1M documents / 200M uint16 tokens (`--quick`: 100k / 20M). Ours: `TokenWriter.add_documents` (one
  vectorised call) + finalize; reference: `IndexedDatasetBuilder.add_document` per document + finalize. Target 3x.
- preprocess: JSONL (4 files) -> .bin/.idx end to end with a locally trained byte-level BPE tokenizer.json, vs the
  tokenizer's own `encode_batch` over the same texts already in memory, on the same cores. Target 0.9x.
  Scaled (see PREPROCESS_DOCS): tokenizing 200M tokens takes ~15 min per run on this shared 2-core machine.
- s3: 10k GPT-style samples (2049 tokens from a random document on, spanning documents) from the written token
  file on SeaweedFS. Ours: `IndexedTokens.get_many` per batch of 64 samples; reference: megatron's
  `IndexedDataset(mmap=False, object_storage_config=S3Config(...))` with `get()` per piece (what GPTDataset does).
  Megatron reads 256 MiB blocks, so it runs on a subset of the same samples (MEGATRON_S3_SAMPLES) and its
  throughput is samples/s over that subset. Target 10x throughput; bytes fetched <= 2x bytes needed.
- s3verify: the cost of `verify="crc"` (tokens/checksums.py) on SeaweedFS: every document of the written file in
  file order (`get_many` per VERIFY_DOC_BATCH documents), and the s3 part's random GPT samples; ours: verified,
  reference: `verify="none"`, same reads. The ratio is the verified throughput over the unverified one (issue 27:
  on by default for remote reads when the cost is under 10%, a ratio >= 0.9). Verified reads fetch whole 64 KiB
  chunks: the notes give the bytes fetched against the unverified reads'.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import statistics
import time

import numpy as np

from benchmarks.harness import Comparison, alternate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "benchmarks", "data", "tokens")
SAMPLE_TOKENS = 2049
S3_SAMPLES = 10_000
S3_BATCH = 64
MEGATRON_S3_SAMPLES = 40
PREPROCESS_DOCS = 40_000
VERIFY_DOC_BATCH = 4096


def _megatron():
    from megatron.core.datasets import indexed_dataset
    from megatron.core.msc_utils import MultiStorageClientFeature

    MultiStorageClientFeature.disable()
    return indexed_dataset


def _remove(prefix: str) -> None:
    for ext in (".bin", ".idx", ".crc"):
        if os.path.exists(prefix + ext):
            os.remove(prefix + ext)


def make_tokens(n_docs: int, mean_len: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 2 * mean_len, n_docs).astype(np.int64)
    tokens = rng.integers(0, 50_000, int(lengths.sum()), dtype=np.uint16)
    return tokens, lengths


# ---- write ------------------------------------------------------------------------------------------------
def bench_write(args, tokens, lengths) -> Comparison:
    from energon_arrow.tokens.builder import TokenWriter

    megatron = _megatron()
    ours_prefix, ref_prefix = os.path.join(DATA, "w_ours"), os.path.join(DATA, "w_ref")
    ends = np.cumsum(lengths)
    starts = ends - lengths

    def ours():
        _remove(ours_prefix)
        t0 = time.perf_counter()
        with TokenWriter(ours_prefix, np.uint16) as w:
            w.add_documents(tokens, lengths)
        return time.perf_counter() - t0

    def reference():
        _remove(ref_prefix)
        t0 = time.perf_counter()
        b = megatron.IndexedDatasetBuilder(ref_prefix + ".bin", dtype=np.uint16)
        for a, e in zip(starts.tolist(), ends.tolist()):
            b.add_document(tokens[a:e], [e - a])
        b.finalize(ref_prefix + ".idx")
        return time.perf_counter() - t0

    def ours_per_document():
        _remove(ours_prefix + "_pd")
        t0 = time.perf_counter()
        with TokenWriter(ours_prefix + "_pd", np.uint16) as w:
            for a, e in zip(starts.tolist(), ends.tolist()):
                w.add_document(tokens[a:e])
        return time.perf_counter() - t0

    o, r = alternate(ours, reference, args.repeats)
    per_doc = ours_per_document()
    identical = all(
        pathlib.Path(ours_prefix + ext).read_bytes() == pathlib.Path(ref_prefix + ext).read_bytes()
        for ext in (".bin", ".idx")
    )
    _remove(ref_prefix)
    _remove(ours_prefix + "_pd")
    return Comparison(
        f"write {lengths.size:,} docs / {tokens.size:,} uint16 tokens",
        "s",
        o,
        r,
        target=3.0,
        notes={"byte_identical": identical, "ours_add_document_per_doc_s": round(per_doc, 3)},
    )


def _cpu_seconds() -> float:
    """User + system CPU time of this process and its reaped children (the preprocess workers)."""
    import resource

    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        total += r.ru_utime + r.ru_stime
    return total


# ---- preprocess -------------------------------------------------------------------------------------------
def _words(rng, n=20_000):
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    return np.array(["".join(rng.choice(letters, rng.integers(2, 10))) for _ in range(n)])


def prepare_preprocess_inputs(n_docs: int):
    """A locally trained byte-level BPE tokenizer.json and 4 JSONL files of Zipf-distributed words."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    folder = os.path.join(DATA, f"pre_{n_docs}")
    tok_path = os.path.join(folder, "tokenizer.json")
    files = [os.path.join(folder, f"part{k}.jsonl") for k in range(4)]
    if all(os.path.exists(p) for p in [tok_path, *files]):
        return tok_path, files
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(1)
    words = _words(rng)
    p = 1 / np.arange(1, words.size + 1)
    p /= p.sum()

    def text():
        return " ".join(words[rng.choice(words.size, int(rng.integers(20, 300)), p=p)])

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=16_000,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator([text() for _ in range(2000)], trainer)
    tok.save(tok_path)
    per = n_docs // len(files)
    for f in files:
        with open(f, "w") as fh:
            for _ in range(per):
                fh.write(json.dumps({"text": text()}) + "\n")
    return tok_path, files


def bench_preprocess(args) -> Comparison:
    from tokenizers import Tokenizer

    from energon_arrow.tokens.preprocess import PreprocessOptions, preprocess
    from energon_arrow.tokens.text_tokenizers import TokenizerSpec

    n_docs = PREPROCESS_DOCS // (6 if args.quick else 1)
    tok_path, files = prepare_preprocess_inputs(n_docs)
    texts = [json.loads(line)["text"] for f in files for line in pathlib.Path(f).read_text().splitlines()]
    tok = Tokenizer.from_file(tok_path)
    workers = os.cpu_count() or 1
    out = os.path.join(DATA, "pre_out")
    stats = {}

    cpu = {"ours": [], "reference": []}  # documents per CPU-second (this process and its workers)

    def ours():
        c0 = _cpu_seconds()
        opts = PreprocessOptions(TokenizerSpec(tok_path), append_eod=True, workers=workers)
        s = preprocess(files, out, opts)
        cpu["ours"].append(s["documents"] / (_cpu_seconds() - c0))
        stats.update(tokens=s["tokens"], mb=s["input_bytes"] / 1e6)
        return s["documents"] / s["seconds"]

    def reference():
        c0 = _cpu_seconds()
        t0 = time.perf_counter()
        for a in range(0, len(texts), 1024):
            tok.encode_batch_fast(texts[a : a + 1024])
        dt = time.perf_counter() - t0
        cpu["reference"].append(len(texts) / (_cpu_seconds() - c0))
        return len(texts) / dt

    o, r = alternate(ours, reference, args.repeats)
    cpu_ratio = statistics.median(cpu["ours"]) / statistics.median(cpu["reference"])
    _remove(out + "_text_document")
    return Comparison(
        f"preprocess {len(texts):,} JSONL docs ({stats['tokens']:,} tokens, {stats['mb']:.0f} MB), {workers} cores",
        "docs/s",
        o,
        r,
        target=0.9,
        notes={
            "workers": workers,
            "scaled_from": "1M docs / 200M tokens",
            "tokenizer": "byte-level BPE, 16k vocab",
            "pairwise_ratios": [round(a / b, 3) for a, b in zip(o, r)],
            "docs_per_cpu_second_ours": [round(x, 1) for x in cpu["ours"]],
            "docs_per_cpu_second_reference": [round(x, 1) for x in cpu["reference"]],
            "cpu_efficiency_ratio": round(cpu_ratio, 3),
        },
    )


# ---- merge ------------------------------------------------------------------------------------------------
_MERGE_SIDE = """
import resource, sys, time
import numpy as np
parts, out, side = sys.argv[1].split(","), sys.argv[2], sys.argv[3]
t0 = time.perf_counter()
if side == "ours":
    from energon_arrow.tokens.builder import merge_datasets
    merge_datasets(parts, out)
else:
    from megatron.core.datasets import indexed_dataset as m
    from megatron.core.msc_utils import MultiStorageClientFeature
    MultiStorageClientFeature.disable()
    b = m.IndexedDatasetBuilder(out + ".bin", dtype=np.uint16)
    for p in parts:
        b.add_index(p)
    b.finalize(out + ".idx")
print(time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def bench_merge(args) -> Comparison:
    """Merge 1,000 parts of 2,000 documents each (2M documents), each side in a fresh process (peak RSS)."""
    import subprocess
    import sys

    from energon_arrow.tokens.builder import TokenWriter

    n_parts = 100 if args.quick else 1000
    folder = os.path.join(DATA, f"merge_{n_parts}")
    parts = [os.path.join(folder, f"p{k:04d}") for k in range(n_parts)]
    if not os.path.exists(parts[-1] + ".idx"):
        os.makedirs(folder, exist_ok=True)
        rng = np.random.default_rng(4)
        for p in parts:
            lengths = rng.integers(1, 40, 2000)
            with TokenWriter(p, np.uint16) as w:
                w.add_documents(rng.integers(0, 50_000, int(lengths.sum()), dtype=np.uint16), lengths)
    rss = {"ours": [], "megatron": []}

    def side(name):
        out = os.path.join(DATA, f"merged_{name}")
        cmd = [sys.executable, "-c", _MERGE_SIDE, ",".join(parts), out, name]
        res = subprocess.run(
            cmd, capture_output=True, text=True, check=True, cwd=os.path.dirname(DATA) + "/../.."
        )
        seconds, peak_kb = res.stdout.split()[-2:]
        rss[name].append(int(peak_kb) // 1024)
        return float(seconds)

    o, r = alternate(lambda: side("ours"), lambda: side("megatron"), 1)
    identical = all(
        pathlib.Path(os.path.join(DATA, "merged_ours" + e)).read_bytes()
        == pathlib.Path(os.path.join(DATA, "merged_megatron" + e)).read_bytes()
        for e in (".bin", ".idx")
    )
    for name in rss:
        _remove(os.path.join(DATA, f"merged_{name}"))
    return Comparison(
        f"merge {n_parts:,} parts / {2000 * n_parts:,} documents (add_index)",
        "s",
        o,
        r,
        notes={
            "peak_rss_mb_ours": rss["ours"],
            "peak_rss_mb_megatron": rss["megatron"],
            "byte_identical": identical,
        },
    )


# ---- S3 random reads --------------------------------------------------------------------------------------
def gpt_samples(ds_lengths: np.ndarray, n: int, seed: int = 3):
    """Pieces (seq, offset, length) of n samples of SAMPLE_TOKENS tokens starting at random documents."""
    rng = np.random.default_rng(seed)
    csum = np.concatenate([[0], np.cumsum(ds_lengths)])
    total = int(csum[-1])
    first = rng.integers(0, int(np.searchsorted(csum, total - SAMPLE_TOKENS, "right")) - 1, n)
    samples = []
    for d in first.tolist():
        start = int(csum[d])
        end = start + SAMPLE_TOKENS
        last = int(np.searchsorted(csum, end, "left"))
        seqs = np.arange(d, last)
        lens = np.minimum(csum[seqs + 1], end) - csum[seqs]
        samples.append((seqs, np.zeros(seqs.size, np.int64), lens))
    return samples


def bench_s3(args, prefix: str) -> list[Comparison]:
    from energon_arrow.testing.seaweedfs import start_seaweedfs
    from energon_arrow.tokens.indexed import IndexedTokens

    megatron = _megatron()
    server = start_seaweedfs()
    try:
        bucket = server.create_bucket("bench-tokens")
        opts = server.storage_options
        client = server.client()
        # no side file: megatron's reader and ours both unverified (verify costs: s3verify)
        for ext in (".bin", ".idx"):
            client.upload_file(prefix + ext, bucket, f"data/tokens{ext}")
        url = f"s3://{bucket}/data/tokens"
        local = IndexedTokens(prefix)
        n = S3_SAMPLES // (10 if args.quick else 1)
        samples = gpt_samples(np.asarray(local.sequence_lengths, np.int64), n)
        needed = sum(int(s[2].sum()) for s in samples) * 2
        want = [local.get_many(*s) for s in samples[:MEGATRON_S3_SAMPLES]]
        ours_stats = {}

        def ours():
            ds = IndexedTokens(url, opts)
            t0 = time.perf_counter()
            for a in range(0, n, S3_BATCH):
                batch = samples[a : a + S3_BATCH]
                ds.get_many(*(np.concatenate([s[k] for s in batch]) for k in range(3)))
            dt = time.perf_counter() - t0
            ours_stats.update(ds.io_stats())
            return n / dt

        os.environ.update(
            AWS_ENDPOINT_URL=server.endpoint_url,
            AWS_ACCESS_KEY_ID=opts["key"],
            AWS_SECRET_ACCESS_KEY=opts["secret"],
            AWS_DEFAULT_REGION="us-east-1",
        )
        ref_stats = {"bytes_fetched": 0, "requests": 0}
        cache_dir = os.path.join(DATA, "megatron_idx_cache")

        def reference():
            shutil.rmtree(cache_dir, ignore_errors=True)
            ds = megatron.IndexedDataset(
                url,
                multimodal=False,
                mmap=False,
                object_storage_config=megatron.S3Config(path_to_idx_cache=cache_dir),
            )
            inner = ds.bin_reader._client
            real_get = inner.get_object

            def counting_get(**kw):  # count what megatron's reader downloads
                resp = real_get(**kw)
                a, b = kw["Range"].removeprefix("bytes=").split("-")
                ref_stats["bytes_fetched"] += int(b) - int(a) + 1
                ref_stats["requests"] += 1
                return resp

            inner.get_object = counting_get
            t0 = time.perf_counter()
            for k, (seqs, offs, lens) in enumerate(samples[:MEGATRON_S3_SAMPLES]):
                got = np.concatenate([ds.get(int(s), int(o), int(ln)) for s, o, ln in zip(seqs, offs, lens)])
                assert np.array_equal(got, want[k])
            return MEGATRON_S3_SAMPLES / (time.perf_counter() - t0)

        o, r = alternate(ours, reference, 1)
        ref_needed = sum(int(s[2].sum()) for s in samples[:MEGATRON_S3_SAMPLES]) * 2
        amp_ours = ours_stats["bytes_fetched"] / needed
        amp_ref = ref_stats["bytes_fetched"] / ref_needed
        return [
            Comparison(
                f"S3 random reads, {n:,} GPT samples of {SAMPLE_TOKENS} tokens (SeaweedFS)",
                "samples/s",
                o,
                r,
                target=10.0,
                notes={
                    "ours_bytes_fetched_over_needed": round(amp_ours, 4),
                    "megatron_bytes_fetched_over_needed": round(amp_ref, 1),
                    "ours_requests": ours_stats["requests"],
                    "megatron_samples_measured": MEGATRON_S3_SAMPLES,
                    "megatron_requests": ref_stats["requests"],
                    "ours_batch_samples": S3_BATCH,
                    "amplification_target_met": amp_ours <= 2.0,
                },
            )
        ]
    finally:
        server.stop()
        for key in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
            os.environ.pop(key, None)


def bench_s3_verify(args, prefix: str) -> list[Comparison]:
    from energon_arrow.testing.seaweedfs import start_seaweedfs
    from energon_arrow.tokens.indexed import IndexedTokens

    server = start_seaweedfs()
    try:
        bucket = server.create_bucket("bench-verify")
        client = server.client()
        for ext in (".bin", ".idx", ".crc"):
            client.upload_file(prefix + ext, bucket, f"data/tokens{ext}")
        url, opts = f"s3://{bucket}/data/tokens", server.storage_options
        local = IndexedTokens(prefix)
        n = S3_SAMPLES // (10 if args.quick else 1)
        samples = gpt_samples(np.asarray(local.sequence_lengths, np.int64), n)
        docs = local.num_documents
        stats: dict[str, dict] = {}

        def reader(mode: str, what: str):
            def run():
                ds = IndexedTokens(url, opts, verify=mode)
                t0 = time.perf_counter()
                if what == "documents":
                    for a in range(0, docs, VERIFY_DOC_BATCH):
                        ds.get_many(np.arange(a, min(docs, a + VERIFY_DOC_BATCH)))
                    count = docs
                else:
                    for a in range(0, n, S3_BATCH):
                        batch = samples[a : a + S3_BATCH]
                        ds.get_many(*(np.concatenate([s[k] for s in batch]) for k in range(3)))
                    count = n
                dt = time.perf_counter() - t0
                stats[f"{what}_{mode}"] = ds.io_stats()
                return count / dt

            return run

        out = []
        for what, unit, label in (
            (
                "documents",
                "documents/s",
                f"every document in file order ({docs:,}, {local.bin_size >> 20} MiB)",
            ),
            ("samples", "samples/s", f"{n:,} random GPT samples of {SAMPLE_TOKENS} tokens"),
        ):
            o, r = alternate(reader("crc", what), reader("none", what), 3 if args.quick else 7)
            fetched = stats[f"{what}_crc"]["bytes_fetched"] / max(1, stats[f"{what}_none"]["bytes_fetched"])
            out.append(
                Comparison(
                    f"S3 verify='crc' vs 'none', {label} (SeaweedFS)",
                    unit,
                    o,
                    r,
                    target=0.9,
                    notes={
                        "bytes_fetched_crc_over_none": round(fetched, 3),
                        "requests": stats[f"{what}_crc"],
                    },
                )
            )
        return out
    finally:
        server.stop()


def run(args) -> list[Comparison]:
    os.makedirs(DATA, exist_ok=True)
    parts = os.environ.get("BENCH_TOKENS_PARTS", "write,s3,s3verify,preprocess,merge").split(",")  # one part
    comparisons = []
    if {"write", "s3", "s3verify"} & set(parts):
        n_docs = 100_000 if args.quick else 1_000_000
        tokens, lengths = make_tokens(n_docs, 200)
        comparisons.append(bench_write(args, tokens, lengths))
        del tokens
    if "s3" in parts:
        comparisons += bench_s3(args, os.path.join(DATA, "w_ours"))
    if "s3verify" in parts:
        comparisons += bench_s3_verify(args, os.path.join(DATA, "w_ours"))
    if "preprocess" in parts:
        comparisons.append(bench_preprocess(args))
    if "merge" in parts:
        comparisons.append(bench_merge(args))
    return comparisons
