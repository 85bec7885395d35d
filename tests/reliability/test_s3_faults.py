"""S3 fault injection: 5% of the requests (seeded) fail through the FaultProxy in front of SeaweedFS - 500, 503
with every throttling code botocore knows, 429, connection resets, stalled and truncated bodies - and prepare, the
loader over S3 shards, token reads and the Nanoset still complete with results identical to the fault-free run.
The requests faulted per suite are printed (docs/reliability.md lists them)."""

from __future__ import annotations

import json
import uuid

import numpy as np
import pytest

from energon_arrow.testing.faultproxy import FaultProxy
from energon_arrow.testing.s3_faults import TRANSIENT, prepare, through
from energon_arrow.testing.synthetic import write_webdataset

pytestmark = pytest.mark.s3

RATE = 0.05
FAULTS = TRANSIENT
FAULTED: dict[str, dict] = {}


@pytest.fixture(scope="module")
def proxy(s3_server):
    with FaultProxy(s3_server.endpoint_url) as p:
        p.stall_s = 1.0  # beyond the read timeout below: the client gives up on the stalled body and retries
        yield p
    print("\nS3 requests faulted per suite:", json.dumps(FAULTED))


@pytest.fixture
def root(s3_server):
    bucket = s3_server.create_bucket("ea-faults")
    return f"s3://{bucket}/{uuid.uuid4().hex[:12]}"


class Faulty:
    """`with Faulty(proxy, "suite"):` faults RATE of the requests inside, and records how many."""

    def __init__(self, proxy, suite: str, seed: int):
        self.proxy, self.suite, self.seed = proxy, suite, seed

    def __enter__(self):
        self.proxy.reset_counts()
        self.proxy.randomize(RATE, FAULTS, seed=self.seed)

    def __exit__(self, *exc):
        faulted = self.proxy.faulted()
        FAULTED[self.suite] = {"requests": self.proxy.count(), "faulted": sum(faulted.values()), **faulted}
        self.proxy.reset_counts()


def rows(url: str, options: dict):
    from energon_arrow.query import open_dataset

    with open_dataset(url, options) as ds:
        return [ds.sql(f"SELECT * FROM {t}").arrow() for t in ("samples", "parts")]


def test_prepare_with_faults(proxy, root, s3_server):
    direct = s3_server.storage_options
    for url in (root, root + "-reference"):
        write_webdataset(url, shards=8, samples_per_shard=40, image_bytes=100, storage_options=direct)
    prepare(root + "-reference", direct)
    with Faulty(proxy, "prepare", seed=1):
        prepare(root, through(proxy))
    assert rows(root, direct) == rows(root + "-reference", direct)


def loader_keys(url: str, options: dict, batches: int = 12) -> list:
    import energon_arrow as ea

    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = ea.get_train_dataset(
        url, batch_size=8, shuffle_buffer_size=20, max_samples_per_sequence=5, worker_config=wc,
        storage_options=options,
    )  # fmt: skip
    out = []
    for i, batch in enumerate(ea.get_loader(ds)):
        out.append((list(batch.__key__), list(batch.text)))
        if i + 1 == batches:
            return out
    return out


def test_loader_with_faults(proxy, root, s3_server):
    direct = s3_server.storage_options
    write_webdataset(root, shards=12, samples_per_shard=20, image_bytes=100, storage_options=direct)
    prepare(root, direct)
    expected = loader_keys(root, direct)
    with Faulty(proxy, "loader", seed=2):
        got = loader_keys(root, through(proxy))
    assert got == expected


def token_data(root: str, options: dict):
    from energon_arrow.tokens.builder import TokenWriter

    rng = np.random.default_rng(7)
    lengths = rng.integers(1, 300, size=600)
    tokens = rng.integers(0, 60000, size=int(lengths.sum())).astype(np.uint16)
    prefix = f"{root}/tok/corpus"
    with TokenWriter(prefix, dtype=np.uint16, storage_options=options) as w:
        w.add_documents(tokens, lengths)
        w.finalize()
    return prefix, tokens, np.concatenate([[0], np.cumsum(lengths)])


def test_token_reads_with_faults(proxy, root, s3_server):
    from energon_arrow.tokens.indexed import IndexedTokens

    prefix, tokens, starts = token_data(root, s3_server.storage_options)
    rng = np.random.default_rng(3)
    order = rng.permutation(len(starts) - 1)
    with Faulty(proxy, "token reads", seed=3):
        # a small cache: most batches miss it and fetch their ranges again
        reader = IndexedTokens(prefix, through(proxy), cache_bytes=64 << 10)
        for chunk in np.array_split(order, 15):
            for k in chunk[:4]:
                assert np.array_equal(reader[int(k)], tokens[starts[k] : starts[k + 1]])
            reader.get_many(chunk)


def nanoset_batches(prefix: str, options: dict, cache: str) -> list[np.ndarray]:
    from energon_arrow.tokens.nanoset import NanosetBuilder, NanosetConfig

    cfg = NanosetConfig(
        [prefix],
        64,
        seed=9,
        split="90,10",
        create_attention_mask=False,
        cache_dir=cache,
        storage_options=options,
    )
    train = NanosetBuilder(cfg).build([1000])[0]
    ids = np.random.default_rng(4).permutation(len(train))[:400]
    return [train.get_batch(chunk)["tokens"].numpy() for chunk in np.array_split(ids, 10)]


def test_nanoset_with_faults(proxy, root, s3_server, tmp_path):
    prefix, _, _ = token_data(root, s3_server.storage_options)
    expected = nanoset_batches(prefix, s3_server.storage_options, str(tmp_path / "a"))
    with Faulty(proxy, "nanoset", seed=4):
        got = nanoset_batches(prefix, through(proxy), str(tmp_path / "b"))
    assert all(np.array_equal(g, e) for g, e in zip(got, expected, strict=True))
