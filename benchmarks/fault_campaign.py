"""The seeded fault campaign of issue 27: `python -m benchmarks.fault_campaign [--seeds N] [--quick]`.

One SeaweedFS server (loopback, random ports, started and stopped here) behind the FaultProxy. For every seed (at
5% for even seeds and 20% for odd ones; `--all-rates`: both) and corruption direction (`corrupt_request`: PUT bodies damaged on their way to the store;
`corrupt_response`: GET bodies damaged on their way back), half of the faults drawn are that corruption and half
the proxy's transient faults (errors, throttling, resets, stalled and truncated bodies, as test_s3_faults), plus
one targeted corruption where random ones are rare (TARGETED), and these scenarios run through the proxy on small generated data, each compared with a fault-free reference computed
once. Every faulted run has the storage option `verify="crc"` (prepare checks the shards it reads against their
ETag's MD5, the loader and token readers check the CRC32Cs recorded for them):

- prepare: 4 shards prepared again (everything but the shards removed first); every published file byte-for-byte
  the fault-free prepare's;
- loader w0 / loader w2: one epoch with `verify="crc"`, 0 and 2 workers, the node-local row index built during the
  faulted run; every batch's keys and bytes;
- info+query: `dataset_info` and SQL over samples, parts and the split with sample exclusions (opened with
  `publish=True`, so the exclusions cache is computed and written through the proxy);
- tokens: `IndexedTokens` over S3 (side-file verification, a node-local `.idx` cache); every document.

A run ends identical or with an error (its type and first line are counted). After each run the faults stop and
a clean rerun on the same dataset and caches must give the reference, and the dataset's files must be unchanged
(after a failed prepare, a clean prepare must give the reference files); any difference is a wrong result.
Then the outage check: 503 to every request for OUTAGE_S seconds, waited out by prepare and by a loader epoch
with `retry_deadline_s=60`. Results: benchmarks/results/fault_campaign.json and a table.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
import uuid
from collections import Counter

import numpy as np

from benchmarks.harness import RESULTS_DIR
from energon_arrow.adapters import open_storage
from energon_arrow.testing.faultproxy import FaultProxy
from energon_arrow.testing.s3_faults import (
    TRANSIENT,
    epoch,
    outage_after_first_request,
    prepare,
    published,
    strip_to_shards,
    through,
)
from energon_arrow.testing.seaweedfs import start_seaweedfs
from energon_arrow.testing.synthetic import write_webdataset

RATES = (0.05, 0.2)
DIRECTIONS = ("corrupt_request", "corrupt_response")
SCENARIOS = ("prepare", "loader w0", "loader w2", "info+query", "tokens")
CORRUPT = set(DIRECTIONS)
# besides the random faults, the first request of a run whose path holds this is damaged (the ~15 PUTs of a
# prepare meet few random ones; loader and token reads PUT nothing: their request direction is transient faults)
TARGETED = {
    ("prepare", "corrupt_request"): ".info.json",
    ("prepare", "corrupt_response"): "shard-000001.tar",
    ("info+query", "corrupt_request"): "excluded-",
}
CAPTIONS = {"image": "jpg", "caption": "txt"}
SPLIT = """split_parts:
  train:
  - shards/shard-{000000..000003}.tar
  val: []
  test: []
exclude:
- shards/shard-000002.tar
- shards/shard-000001.tar/000001_000003
- shards/shard-000003.tar/000003_000000
"""
QUERIES = (
    "SELECT split, shard_id, sample_index, sample_key FROM split_samples ORDER BY ALL",
    "SELECT * FROM parts ORDER BY ALL",
    "SELECT entry, matched FROM excluded ORDER BY ALL",
)


class Wrong(AssertionError):
    """A result that differs from the fault-free reference (or a dataset or cache left wrong afterwards)."""


def files_of(url: str, options: dict) -> dict[str, bytes]:
    store = open_storage(url, options)
    return {f: store.read_bytes(f) for f in store.list_files("**/*")}


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


class Campaign:
    def __init__(self, server, proxy, quick: bool):
        self.server, self.proxy, self.quick = server, proxy, quick
        self.direct = server.storage_options
        root = f"s3://{server.create_bucket('ea-campaign')}/{uuid.uuid4().hex[:10]}"
        self.prep, self.load, self.tok = f"{root}/prep", f"{root}/load", f"{root}/tok/t"
        self.local = tempfile.mkdtemp(prefix="ea-campaign-")
        os.environ["ENERGON_ARROW_CACHE"] = os.path.join(self.local, "node-cache")  # the row index's home
        self.idx_cache = os.path.join(self.local, "idx-cache")
        self.stats: dict[str, dict] = {
            s: dict.fromkeys(("runs", "identical", "errors", "wrong", "wall_s"), 0)
            | {"faults": Counter(), "error_kinds": Counter()}
            for s in SCENARIOS
        }
        self.wrong: list[dict] = []

    # ---- data and references (fault-free, computed once) ------------------------------------------------
    def setup(self) -> None:
        samples = 8 if self.quick else 12
        write_webdataset(
            self.prep, shards=4, samples_per_shard=samples, image_bytes=1500, storage_options=self.direct
        )
        prepare(self.prep, self.direct)
        self.ref_prep = published(self.prep, self.direct)
        write_webdataset(
            self.load, shards=4, samples_per_shard=samples, image_bytes=1500, storage_options=self.direct
        )
        prepare(self.load, self.direct, "CaptioningSample", CAPTIONS)
        open_storage(self.load, self.direct).write_atomic(".nv-meta/split.yaml", SPLIT.encode())
        self.ref_epoch = epoch(self.load, self.direct, verify="crc")
        self.ref_info = self.info_query(self.direct)  # publishes the exclusions cache
        self.ref_load_files = files_of(self.load, self.direct)
        from energon_arrow.tokens.builder import TokenWriter

        rng = np.random.default_rng(5)
        self.docs = [rng.integers(0, 60000, int(rng.integers(1, 2000)), dtype=np.int32) for _ in range(200)]
        with TokenWriter(self.tok, np.int32, storage_options=self.direct) as w:
            for d in self.docs:
                w.add_document(d)
        self.ref_tok_files = files_of(self.tok.rpartition("/")[0], self.direct)

    # ---- the reads ------------------------------------------------------------------------------------------
    def info_query(self, options: dict) -> str:
        from energon_arrow.query import open_dataset
        from energon_arrow.query.info import dataset_info

        with open_dataset(self.load, options, publish=True) as ds:
            info = dataset_info(ds)
            tables = [ds.sql(q).arrow().to_pylist() for q in QUERIES]
        return json.dumps([info, tables], sort_keys=True, default=str)

    def tokens(self, options: dict) -> list[np.ndarray]:
        from energon_arrow.tokens.indexed import IndexedTokens

        reader = IndexedTokens(self.tok, options, cache_bytes=64 << 10, idx_cache_dir=self.idx_cache)
        order = np.random.default_rng(3).permutation(len(self.docs))
        got: dict[int, np.ndarray] = {}
        for chunk in np.array_split(order, 8):
            for k in chunk[:5]:
                got[int(k)] = np.array(reader[int(k)])
            many = reader.get_many(chunk)
            lengths = [len(self.docs[k]) for k in chunk]
            for k, piece in zip(chunk, np.split(many, np.cumsum(lengths)[:-1]), strict=True):
                if int(k) in got and not np.array_equal(got[int(k)], piece):
                    raise Wrong(f"document {k}: get_many differs from a single read")
                got[int(k)] = piece
        return [got[k] for k in range(len(self.docs))]

    def check_tokens(self, options: dict) -> None:
        got = self.tokens(options)
        bad = [k for k, (g, d) in enumerate(zip(got, self.docs, strict=True)) if not np.array_equal(g, d)]
        if bad:
            raise Wrong(f"{len(bad)} of {len(self.docs)} documents differ (first: {bad[:5]})")

    # ---- one scenario of one run ------------------------------------------------------------------------------
    def faulted(self, options: dict, scenario: str) -> None:
        """The scenario's work through the proxy (faults on); raises Wrong on a result differing from the reference."""
        if scenario == "prepare":
            prepare(self.prep, options)
            if published(self.prep, self.direct) != self.ref_prep:
                raise Wrong(
                    "a prepare that completed published files that differ from the fault-free prepare's"
                )
        elif scenario.startswith("loader"):
            if epoch(self.load, options, verify="crc", workers=int(scenario[-1])) != self.ref_epoch:
                raise Wrong("an epoch differs from the fault-free epoch")
        elif scenario == "info+query":
            if self.info_query(options) != self.ref_info:
                raise Wrong("info or a query differs from the fault-free output")
        else:
            self.check_tokens(options)

    def before(self, scenario: str) -> None:
        """Make the faulted run build what it would build: a fresh prepare, an empty row index, exclusions and
        .idx cache."""
        if scenario == "prepare":
            strip_to_shards(self.prep, self.direct)
        elif scenario.startswith("loader"):
            from energon_arrow.loader.row_index import default_cache_dir

            shutil.rmtree(default_cache_dir(), ignore_errors=True)
        elif scenario == "info+query":
            from energon_arrow.query.exclusions import cache_rel

            open_storage(self.load, self.direct).remove(cache_rel("split.yaml"))
        else:
            shutil.rmtree(self.idx_cache, ignore_errors=True)

    def after(self, scenario: str, clean: dict, failed: bool) -> None:
        """Faults off: a clean rerun on the same dataset and caches gives the reference, and the files are
        unchanged (after a failed prepare: a clean prepare gives the reference files)."""
        if scenario == "prepare":
            if failed:
                prepare(self.prep, clean)
            if published(self.prep, self.direct) != self.ref_prep:
                raise Wrong("the files after a clean prepare differ from the reference")
            return
        if scenario == "tokens":
            self.check_tokens(clean)
            if files_of(self.tok.rpartition("/")[0], self.direct) != self.ref_tok_files:
                raise Wrong("the token files changed")
            return
        if scenario == "info+query":
            if self.info_query(clean) != self.ref_info:
                raise Wrong("a clean info/query after the run differs (a cache left wrong)")
        elif epoch(self.load, clean, verify="crc", workers=int(scenario[-1])) != self.ref_epoch:
            raise Wrong("a clean epoch after the run differs (the row index left wrong)")
        changed = sorted(
            f for f, data in files_of(self.load, self.direct).items() if self.ref_load_files.get(f) != data
        )
        if changed or set(self.ref_load_files) - set(files_of(self.load, self.direct)):
            raise Wrong(f"dataset files changed or missing: {changed}")

    def run(self, seed: int, rate: float, direction: str) -> None:
        for n, scenario in enumerate(SCENARIOS):
            stats = self.stats[scenario]
            stats["runs"] += 1
            start = time.monotonic()
            self.before(scenario)
            self.proxy.reset_counts()
            self.proxy.randomize(rate, (direction,) * len(TRANSIENT) + TRANSIENT, seed=seed * 1000 + n)
            if (scenario, direction) in TARGETED:
                self.proxy.inject_for(TARGETED[scenario, direction], direction)
            failed = None
            try:
                self.faulted(through(self.proxy, verify="crc"), scenario)
            except Wrong as exc:
                self.record_wrong(scenario, seed, rate, direction, str(exc))
                failed = exc
            except Exception as exc:  # noqa: BLE001 - an error ends the run: counted by its first line
                failed = exc
                stats["errors"] += 1
                stats["error_kinds"][first_line(exc)] += 1
            finally:
                stats["faults"].update(self.proxy.faulted())
                self.proxy.reset_counts()
            try:
                self.after(scenario, through(self.proxy), failed is not None)
            except Exception as exc:  # noqa: BLE001 - anything but the reference after the faults is wrong
                self.record_wrong(scenario, seed, rate, direction, f"after the run: {first_line(exc)}")
                self.restore(scenario)
                continue
            finally:
                stats["wall_s"] += time.monotonic() - start
            if failed is None:
                stats["identical"] += 1

    def record_wrong(self, scenario, seed, rate, direction, what: str) -> None:
        self.stats[scenario]["wrong"] += 1
        self.wrong.append(
            {"scenario": scenario, "seed": seed, "rate": rate, "direction": direction, "what": what}
        )
        print(f"WRONG {scenario} seed {seed} rate {rate} {direction}: {what}", file=sys.stderr)
        traceback.print_exc()

    def restore(self, scenario: str) -> None:
        """Put the reference state back after a wrong result, so that one finding does not cascade."""
        with contextlib.suppress(Exception):
            self.before(scenario)
            if scenario == "prepare":
                prepare(self.prep, self.direct)

    # ---- the outage check -----------------------------------------------------------------------------------
    def outage(self, seconds: float) -> dict:
        out = {"seconds": seconds, "retry_deadline_s": 60}
        options = through(self.proxy, retry_deadline_s=60, verify="crc")
        for name, work, check in (
            (
                "prepare",
                lambda: prepare(self.prep, options),
                lambda _: published(self.prep, self.direct) == self.ref_prep,
            ),
            (
                "loader epoch",
                lambda: epoch(self.load, options, verify="crc"),
                lambda got: got == self.ref_epoch,
            ),
        ):
            self.before(name)
            start = time.monotonic()
            thread = outage_after_first_request(self.proxy, seconds)
            try:
                result = work()
                ok, error = check(result), None
            except Exception as exc:  # noqa: BLE001
                ok, error = False, first_line(exc)
            thread.join()
            faulted = self.proxy.faulted().get("outage", 0)
            self.proxy.reset_counts()
            out[name] = {
                "identical": ok,
                "error": error,
                "outage_answers": faulted,
                "wall_s": round(time.monotonic() - start, 1),
            }
        return out


def table(stats: dict) -> str:
    head = f"{'scenario':<11} {'runs':>5} {'identical':>9} {'errors':>6} {'wrong':>5} {'corrupted':>9} {'transient':>9}"
    lines = [head, "-" * len(head)]
    for name, s in stats.items():
        corrupt = sum(v for k, v in s["faults"].items() if k in CORRUPT)
        transient = sum(v for k, v in s["faults"].items() if k not in CORRUPT)
        lines.append(
            f"{name:<11} {s['runs']:>5} {s['identical']:>9} {s['errors']:>6} {s['wrong']:>5} {corrupt:>9} {transient:>9}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=None, help="seeds (default 40; 2 with --quick)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: fewer samples, a 2 s outage")
    parser.add_argument(
        "--all-rates",
        action="store_true",
        help="every seed at every rate (default: even seeds 5%%, odd 20%%)",
    )
    parser.add_argument("--output", default=os.path.join(RESULTS_DIR, "fault_campaign.json"))
    args = parser.parse_args(argv)
    seeds = args.seeds if args.seeds is not None else (2 if args.quick else 40)
    started, wall = datetime.datetime.now(datetime.timezone.utc), time.monotonic()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the server on the way out
    server = start_seaweedfs()
    try:
        with FaultProxy(server.endpoint_url) as proxy:
            proxy.stall_s = 1.0  # beyond through()'s 0.5 s read timeout
            campaign = Campaign(server, proxy, args.quick)
            try:
                campaign.setup()
                for seed in range(seeds):
                    for rate in RATES if args.all_rates else RATES[seed % 2 :][:1]:
                        for direction in DIRECTIONS:
                            campaign.run(seed, rate, direction)
                    print(f"seed {seed + 1}/{seeds} done ({time.monotonic() - wall:.0f} s)", file=sys.stderr)
                outage = campaign.outage(2.0 if args.quick else 20.0)
            finally:
                shutil.rmtree(campaign.local, ignore_errors=True)
    finally:
        server.stop()
    result = {
        "date": started.isoformat(timespec="seconds"),
        "seeds": seeds,
        "rates": list(RATES),
        "directions": list(DIRECTIONS),
        "quick": args.quick,
        "wall_s": round(time.monotonic() - wall, 1),
        "scenarios": {
            n: {
                **s,
                "wall_s": round(s["wall_s"], 1),
                "faults": dict(sorted(s["faults"].items())),
                "error_kinds": dict(s["error_kinds"]),
            }
            for n, s in campaign.stats.items()
        },
        "wrong": campaign.wrong,
        "outage": outage,
    }
    os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
    with open(args.output, "w") as f:
        json.dump(result, f, indent=2)
    print(table(campaign.stats))
    print(
        f"outage {outage['seconds']} s: "
        + "; ".join(f"{k}: {v}" for k, v in outage.items() if isinstance(v, dict))
    )
    print(f"{seeds} seeds, {len(DIRECTIONS)} directions each, {result['wall_s']} s -> {args.output}")
    ok = not campaign.wrong and all(v["identical"] for v in outage.values() if isinstance(v, dict))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
