"""Shared pieces of the S3 fault tests and the seeded fault campaign (benchmarks/fault_campaign.py): the
transient faults the FaultProxy draws from, storage options through a proxy, a text-sample prepare, a dataset's
published files (for byte-for-byte comparisons), one loader epoch of raw parts, and an outage started mid-work."""

from __future__ import annotations

import json
import threading
import time

from energon_arrow.testing.seaweedfs import ACCESS_KEY, SECRET_KEY

THROTTLING = (
    "SlowDown", "SlowDownRead", "SlowDownWrite", "ServiceUnavailable", "Throttling", "ThrottlingException",
    "ThrottledException", "RequestThrottled", "RequestThrottledException", "TooManyRequestsException",
    "ProvisionedThroughputExceededException", "RequestLimitExceeded", "BandwidthLimitExceeded",
    "LimitExceededException", "EC2ThrottledException", "PriorRequestNotComplete", "TransactionInProgressException",
)  # fmt: skip
# every transient fault: errors, throttling codes, resets, stalled and truncated bodies
TRANSIENT = ("error500", "error429", "reset", "stall", "truncate", *(f"503:{code}" for code in THROTTLING))


def through(proxy, **extra) -> dict:
    """Storage options whose requests go through `proxy` (a 0.5 s read timeout: a stalled body is given up)."""
    return {
        "endpoint_url": proxy.endpoint_url,
        "key": ACCESS_KEY,
        "secret": SECRET_KEY,
        "config_kwargs": {"read_timeout": 0.5, "connect_timeout": 2.0},
        **extra,
    }


def prepare(url: str, options: dict, sample_type: str = "TextSample", fields: dict | None = None) -> None:
    """Prepare `url` (one train split, 2 workers) with a field-map dataset.yaml (default: text from txt)."""
    from energon_arrow.index.prepare import PrepareOptions, prepare_dataset
    from energon_arrow.meta import field_map_dataset, parse_split_ratio

    options_ = PrepareOptions(
        split_ratio=parse_split_ratio("1,0,0"),
        dataset_yaml=field_map_dataset(sample_type, fields or {"text": "txt"}),
        num_workers=2,
    )
    prepare_dataset(url, options_, options)


def published(url: str, options: dict) -> dict[str, bytes]:
    """Every file of a prepared dataset; the random index.uuid (also in the Parquet metadata and the manifest)
    made the same, so that two prepares of the same shards compare equal."""
    from energon_arrow.adapters import open_storage
    from energon_arrow.meta.manifest import MANIFEST_REL

    store = open_storage(url, options)
    files = {f: store.read_bytes(f) for f in store.list_files("**/*")}
    uuid_ = files[".nv-meta/index.uuid"]
    manifest = json.loads(files[MANIFEST_REL])  # checks itself; the same but for index.uuid's digest
    assert manifest.pop("self_sha256") and manifest["files"].pop(".nv-meta/index.uuid")
    files[MANIFEST_REL] = json.dumps(manifest).encode()
    return {f: data.replace(uuid_, b"<index.uuid>") for f, data in files.items()}


def strip_to_shards(url: str, options: dict) -> None:
    """Remove every file of a prepared dataset but its tar shards (a prepare then starts from nothing)."""
    from energon_arrow.adapters import open_storage

    store = open_storage(url, options)
    for f in store.list_files("**/*"):
        if not f.endswith(".tar"):
            store.remove(f)


def epoch(url: str, options: dict, proxy=None, faults=None, verify=None, workers: int = 0) -> list:
    """(keys, raw jpg bytes, captions) of every batch of one unshuffled pass over a CaptioningSample split;
    `faults` (rate, seed) are turned on once the split is open, so that only the shard reads meet them."""
    from energon_arrow.loader import BatchDataset, Loader, LoaderSettings, open_split
    from energon_arrow.samples.decoders import PartDecoder

    src = open_split(url, "train", options)
    settings = LoaderSettings(global_batch_size=16, seed=3, repeat=False, verify=verify)
    ds = BatchDataset([src], settings, decoder=PartDecoder(raw=True))
    if faults is not None:
        proxy.reset_counts()
        proxy.randomize(faults[0], ("corrupt_response",), seed=faults[1])
    try:
        return [
            (list(b.__key__), [bytes(x) for x in b.image], list(b.caption))
            for b in Loader(ds, num_workers=workers)
        ]
    finally:
        if faults is not None:
            proxy.randomize(0, ())


def outage_after_first_request(proxy, seconds: float) -> threading.Thread:
    """Start an outage of `seconds` when the next request arrives (the client is then mid-operation); the
    returned thread ends once the outage has begun."""
    proxy.reset_counts()
    proxy.inject("slowdown")

    def begin():
        while proxy.count() == 0:
            time.sleep(0.005)
        proxy.outage(seconds)

    thread = threading.Thread(target=begin, daemon=True)
    thread.start()
    return thread
