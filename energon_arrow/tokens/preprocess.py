"""`preprocess`: JSONL documents -> Megatron token datasets `{prefix}_{key}_document.bin/.idx`.

Inputs are split into work units (files, or line-aligned ranges of large local files) processed by worker
processes; each unit becomes a local part per JSON key, and the parts are then merged in input order into the
outputs (local or remote). Output is deterministic whatever the worker count. Each document of a key is one
sequence (tokens plus EOD when asked); a document whose text has no tokens is an empty document (no
sequence, no EOD), as in Megatron's tools/preprocess_data.py.
"""

from __future__ import annotations

import functools
import multiprocessing as mp
import os
import queue as queue_mod
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from energon_arrow.adapters.publish import private_mkdtemp
from energon_arrow.tokens.builder import TokenWriter
from energon_arrow.tokens.idx_format import optimal_dtype
from energon_arrow.tokens.jsonl import (
    BadLineError,
    WorkUnit,
    expand_inputs,
    open_lines,
    parse_document,
    plan_units,
)
from energon_arrow.tokens.text_tokenizers import TokenizerError, TokenizerSpec, load_tokenizer

ProgressFn = Callable[[int, int, int], None]  # (documents, tokens, input bytes) since the last call


@dataclass(frozen=True)
class PreprocessOptions:
    tokenizer: TokenizerSpec
    json_keys: tuple[str, ...] = ("text",)
    append_eod: bool = False
    workers: int = 1
    max_documents: int | None = None
    skip_bad_lines: bool = False
    batch_documents: int = 1024
    tmp_dir: str | None = None
    min_split_bytes: int = (
        64 * 1024 * 1024
    )  # local uncompressed files this large may be split between workers
    storage_options: Mapping[str, Any] = field(default_factory=dict)


def output_prefix_for(prefix: str, key: str) -> str:
    """Megatron's naming: `{prefix}_{key}_document`."""
    return f"{prefix}_{key}_document"


def preprocess(
    inputs: Sequence[str], output_prefix: str, opts: PreprocessOptions, progress: ProgressFn | None = None
):
    """Tokenize `inputs` (paths, globs or URLs) into `{output_prefix}_{key}_document.bin/.idx`; returns a summary.
    Under torch.distributed see `energon_arrow.tokens.preprocess_dist.preprocess_distributed`."""
    tok, dtype = check_options(opts)
    t0 = time.perf_counter()
    files = expand_inputs(inputs, opts.storage_options)
    units = plan_units(files, opts.workers, opts.min_split_bytes)
    part_dir = private_mkdtemp("ea-preprocess-", opts.tmp_dir)
    try:
        results = run_units(units, opts, dtype, part_dir, progress or (lambda d, t, b: None))
        outputs = merge_parts(results, output_prefix, opts, dtype)
    finally:
        shutil.rmtree(part_dir, ignore_errors=True)
    return summarize(files, len(units), opts, tok, dtype, results, outputs, t0)


def check_options(opts: PreprocessOptions):
    """(tokenizer, token dtype) for `opts`, after checking them."""
    if opts.workers < 1:
        raise ValueError("workers must be at least 1")
    if opts.max_documents is not None and opts.max_documents < 0:
        raise ValueError("max_documents must be non-negative")
    if not opts.json_keys or len(set(opts.json_keys)) != len(opts.json_keys):
        raise ValueError(f"json keys must be distinct and non-empty: {list(opts.json_keys)}")
    tok = _tokenizer(opts.tokenizer)  # cached: forked workers inherit it instead of loading it again
    if opts.append_eod and tok.eod is None:
        raise TokenizerError(f"{tok.name}: no end-of-document token found; pass --eod-token")
    return tok, optimal_dtype(tok.vocab_size)


def summarize(files, n_units: int, opts, tok, dtype, results: list[dict], outputs: dict, t0: float) -> dict:
    seconds = time.perf_counter() - t0
    docs = sum(r["documents"] for r in results)
    if opts.max_documents is not None:
        docs = min(docs, opts.max_documents)
    tokens = sum(o["tokens"] for o in outputs.values())
    nbytes = sum(r["bytes"] for r in results)
    bad = [r["first_bad_line"] for r in results if r["first_bad_line"]]
    return {
        "inputs": [f.url for f in files],
        "work_units": n_units,
        "workers": opts.workers,
        "tokenizer": tok.name,
        "vocab_size": tok.vocab_size,
        "dtype": str(dtype),
        "documents": docs,
        "tokens": tokens,
        "input_bytes": nbytes,
        "bad_lines_skipped": sum(r["bad_lines"] for r in results),
        "first_bad_line": bad[0] if bad else None,
        "seconds": round(seconds, 3),
        "documents_per_s": round(docs / seconds, 1) if seconds else None,
        "tokens_per_s": round(tokens / seconds, 1) if seconds else None,
        "mb_per_s": round(nbytes / seconds / 1e6, 2) if seconds else None,
        "outputs": outputs,
    }


# ---- work units ---------------------------------------------------------------------------------------------
_QUEUE = None


def _init_worker(q) -> None:
    global _QUEUE
    _QUEUE = q
    # parallelism comes from the worker processes: one tokenizer thread each avoids oversubscribed spinning
    os.environ.setdefault("RAYON_NUM_THREADS", "1")


def run_units(
    units: list[WorkUnit], opts, dtype, part_dir, progress: ProgressFn, numbers=None, spool_dir=None
) -> list[dict]:
    """Each unit's part (named by `numbers[k]`, its place in the whole input; default k) under `part_dir` (a
    local folder or a URL), spooling index arrays in `spool_dir` (default `part_dir`)."""
    numbers = list(range(len(units))) if numbers is None else numbers
    if opts.workers == 1 or len(units) == 1:  # in order, up to --max-documents (later units are not read)
        results, left = [], opts.max_documents
        for k, u in enumerate(units):
            if left is not None and left <= 0 and results:
                break
            results.append(_process_unit(u, numbers[k], opts, dtype, part_dir, progress, spool_dir))
            if left is not None:
                left -= results[-1]["documents"]
        return results
    # fork where the platform has it: workers start in milliseconds and scripts need no __main__ guard
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    q = ctx.Queue()
    with ProcessPoolExecutor(min(opts.workers, len(units)), ctx, _init_worker, (q,)) as pool:
        futures = [
            pool.submit(_process_unit, u, numbers[k], opts, dtype, part_dir, None, spool_dir)
            for k, u in enumerate(units)
        ]
        try:
            pending = set(futures)
            while pending:
                done, pending = wait(pending, timeout=0.2, return_when=FIRST_EXCEPTION)
                _drain(q, progress)
                # --max-documents reached: the later units are not needed (nor are their errors)
                enough = _units_for(futures, opts.max_documents)
                if enough is not None:
                    for f in futures[enough:]:
                        f.cancel()
                    return [f.result() for f in futures[:enough]]
                failed = [k for k, f in enumerate(futures) if f.done() and f.exception() is not None]
                if failed:
                    _raise_first_failure(futures, failed[0], opts.max_documents)
        except BaseException:
            for f in futures:
                f.cancel()
            raise
        _drain(q, progress)
        return [f.result() for f in futures]


def _units_for(futures, max_documents: int | None) -> int | None:
    """How many leading units hold `max_documents` documents, once they are all done without error (None
    otherwise, or without a limit)."""
    if max_documents is None:
        return None
    total = 0
    for k, f in enumerate(futures):
        if not f.done() or f.exception() is not None:
            return None
        total += f.result()["documents"]
        if total >= max_documents:
            return k + 1
    return None


def _raise_first_failure(futures, first: int, max_documents: int | None) -> None:
    """Report the failure of the earliest unit in input order, whichever worker failed first in time (unless
    the units before it already hold `max_documents` documents: then the caller returns them)."""
    for f in futures[first + 1 :]:
        f.cancel()
    wait(futures[:first])
    if _units_for(futures[:first], max_documents) is not None:
        return
    for f in futures[: first + 1]:
        if f.exception() is not None:
            raise f.exception()


def _drain(q, progress: ProgressFn) -> None:
    while True:
        try:
            progress(*q.get_nowait())
        except queue_mod.Empty:
            return


def _process_unit(
    unit: WorkUnit, index: int, opts: PreprocessOptions, dtype, part_dir: str, progress, spool_dir=None
):
    """Tokenize one unit into one part per key (under `part_dir`, local or a URL); returns counts and part
    prefixes."""
    if progress is None:
        progress = (lambda d, t, b: _QUEUE.put((d, t, b))) if _QUEUE is not None else (lambda d, t, b: None)
    tok = _tokenizer(opts.tokenizer)
    keys = opts.json_keys
    parts = {k: f"{part_dir.rstrip('/')}/u{index:06d}_{k}" for k in keys}
    options = opts.storage_options if "://" in part_dir else None  # parts beside a remote output
    writers = {k: TokenWriter(parts[k], dtype, options, spool_dir=spool_dir or part_dir) for k in keys}
    stats = {"documents": 0, "bytes": 0, "bad_lines": 0, "first_bad_line": None, "parts": parts}
    stats["part_options"] = options
    batch: list[list[str]] = []
    pending_bytes = 0
    url = unit.file.url
    try:
        lines = open_lines(unit) if opts.max_documents != 0 else iter(())
        for number, line in lines:
            stats["bytes"] += len(line)
            pending_bytes += len(line)
            try:
                texts = parse_document(line, keys, url, number)
            except BadLineError as exc:
                if not opts.skip_bad_lines:
                    raise
                stats["bad_lines"] += 1
                stats["first_bad_line"] = stats["first_bad_line"] or str(exc)
                continue
            if texts is None:
                continue
            batch.append(texts)
            if len(batch) >= opts.batch_documents:
                _flush(batch, tok, writers, keys, opts.append_eod, progress, pending_bytes)
                stats["documents"] += len(batch)
                batch, pending_bytes = [], 0
            if opts.max_documents is not None and stats["documents"] + len(batch) >= opts.max_documents:
                break
        _flush(batch, tok, writers, keys, opts.append_eod, progress, pending_bytes)
        stats["documents"] += len(batch)
        for w in writers.values():
            w.finalize()
    except BaseException:
        for w in writers.values():
            w.abort()
        raise
    return stats


@functools.lru_cache(maxsize=4)
def _tokenizer(spec: TokenizerSpec):
    """One loaded tokenizer per process and spec (units of a worker reuse it)."""
    return load_tokenizer(spec)


def _flush(batch, tok, writers, keys, append_eod: bool, progress, nbytes: int) -> None:
    tokens = 0
    for j, key in enumerate(keys):
        if not batch:
            continue
        ids, lengths = tok.encode_batch([texts[j] for texts in batch])
        if append_eod:
            ids, lengths = with_eod(ids, lengths, tok.eod)
        nonempty = lengths > 0
        writers[key].add_documents(ids, lengths[nonempty], nonempty.astype(np.int64))
        tokens += ids.size
    progress(len(batch), tokens, nbytes)


def with_eod(ids: np.ndarray, lengths: np.ndarray, eod: int) -> tuple[np.ndarray, np.ndarray]:
    """Append `eod` to every non-empty document of a flat batch (vectorised)."""
    add = (lengths > 0).astype(np.int64)
    new_lengths = lengths + add
    ends = np.cumsum(new_lengths)
    eod_pos = ends[add.astype(bool)] - 1
    out = np.empty(int(ends[-1]) if ends.size else 0, np.result_type(ids.dtype, np.min_scalar_type(eod)))
    keep = np.ones(out.size, bool)
    keep[eod_pos] = False
    out[keep] = ids
    out[eod_pos] = eod
    return out, new_lengths


# ---- merging ------------------------------------------------------------------------------------------------
def merge_parts(results: list[dict], output_prefix: str, opts: PreprocessOptions, dtype) -> dict[str, Any]:
    outputs = {}
    for key in opts.json_keys:
        with TokenWriter(
            output_prefix_for(output_prefix, key),
            dtype,
            storage_options=opts.storage_options,
            spool_dir=opts.tmp_dir,
        ) as w:
            left = opts.max_documents
            for r in results:
                if left is not None and left <= 0:
                    break
                w.add_index(r["parts"][key], r["part_options"], max_documents=left)
                if left is not None:
                    left -= r["documents"]
            summary = w.finalize()
        outputs[key] = {**summary, "bin_url": w.bin_url, "idx_url": w.idx_url}
    return outputs
