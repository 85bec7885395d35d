"""`energon-arrow demo`: generate data locally and run the main job end to end on it.

WebDataset shards -> prepare (energon .nv-meta + Parquet side index) -> info and SQL (embedded DuckDB) ->
one training epoch and a resumed run through the loader -> JSONL -> preprocess (Megatron .bin/.idx) -> SQL over
the token dataset -> GPT samples from a Nanoset.
"""

from __future__ import annotations

import json
import os
import shutil
import time

import click


def _step(title: str) -> None:
    click.secho(f"\n== {title}", bold=True)


def _run(args: list[str]) -> None:
    from energon_arrow.cli.main import cli

    click.echo("$ energon-arrow " + " ".join(a if " " not in a else repr(a) for a in args))
    cli.main(args=args, prog_name="energon-arrow", standalone_mode=False)


def _load_epoch(root: str, batch_size: int, workers: int) -> None:
    from energon_arrow import (
        DefaultTaskEncoder,
        WorkerConfig,
        get_loader,
        get_savable_loader,
        get_train_dataset,
    )

    class RawBytes(DefaultTaskEncoder):
        decoder = (
            None  # the generated "jpg" parts are random bytes: hand them over undecoded, as energon would
        )

    config = WorkerConfig(rank=0, world_size=1, num_workers=workers)

    def dataset():
        return get_train_dataset(
            root,
            worker_config=config,
            batch_size=batch_size,
            shuffle_buffer_size=100,
            max_samples_per_sequence=100,
            repeat=False,
            task_encoder=RawBytes(),
        )

    t0 = time.perf_counter()
    samples, batches, keys = 0, 0, set()
    for batch in get_loader(dataset()):
        samples += len(batch.__key__)
        batches += 1
        keys.update(batch.__key__)
    dt = time.perf_counter() - t0
    click.echo(
        f"one epoch of the train split: {samples} samples ({len(keys)} distinct) in {dt:.2f}s, "
        f"batch {batch_size}, {workers} workers; last batch: {len(batch.image)} images of "
        f"{len(batch.image[0])} bytes, caption[0] {batch.caption[0]!r}"
    )

    # interrupt half-way, save the state, restore it in a new loader: the rest of the epoch must be identical
    half = batches // 2
    loader = get_savable_loader(dataset())
    it = iter(loader)
    for _ in range(half):
        next(it)
    state = loader.save_state_rank()
    expected = [b.__key__ for b in it]
    resumed = get_savable_loader(dataset())
    resumed.restore_state_rank(state)
    got = [b.__key__ for b in resumed]
    if got != expected:
        raise click.ClickException("the restored loader diverged from the uninterrupted run")
    click.echo(
        f"saved the loader state after {half} of {batches} batches ({len(json.dumps(state))} bytes of JSON); "
        f"the restored loader continues with the same {len(got)} batches"
    )


def _write_jsonl(path: str, documents: int) -> None:
    words = [
        "the",
        "quick",
        "brown",
        "fox",
        "jumps",
        "over",
        "a",
        "lazy",
        "dog",
        "while",
        "energon",
        "arrow",
        "loads",
        "tokens",
        "fast",
    ]
    with open(path, "w") as f:
        for i in range(documents):
            n = 20 + (i * 37) % 200
            text = " ".join(words[(i * 7 + j) % len(words)] for j in range(n))
            f.write(json.dumps({"id": i, "text": text}) + "\n")


def _nanoset(prefix: str, cache_dir: str, seq_length: int, batch: int) -> None:
    from energon_arrow.tokens.nanoset import NanosetBuilder, NanosetConfig

    config = NanosetConfig(
        paths=[prefix], sequence_length=seq_length, seed=1234, split="98,2,0", cache_dir=cache_dir
    )
    t0 = time.perf_counter()
    train, valid, _ = NanosetBuilder(config).build([None, None, None])
    built = time.perf_counter() - t0
    out = train.get_batch(list(range(min(batch, len(train)))))
    click.echo(
        f"GPT indices (Megatron GPTDataset order) built in {built:.2f}s: {len(train)} train and {len(valid)} "
        f"validation samples of {seq_length} tokens; a batch of {batch}: tokens {tuple(out['tokens'].shape)}, "
        f"labels {tuple(out['labels'].shape)}, loss_mask {tuple(out['loss_mask'].shape)}"
    )


DEMO_OUTPUTS = ("webdataset", "corpus.jsonl", "tokens", "nanoset-cache")  # what a run writes in its workdir


def _remove_previous_run(workdir: str) -> None:
    """Delete what an earlier demo wrote in `workdir`, and nothing else (the workdir may hold other files)."""
    for name in DEMO_OUTPUTS:
        path = os.path.join(workdir, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.remove(path)


@click.command("demo")
@click.option(
    "--workdir", default="/tmp/energon-arrow-demo", show_default=True, help="Where to generate data."
)
@click.option("--shards", default=8, show_default=True, help="WebDataset shards to generate.")
@click.option("--samples-per-shard", default=500, show_default=True)
@click.option("--documents", default=20_000, show_default=True, help="JSONL documents to tokenize.")
@click.option("--workers", default=2, show_default=True, help="Loader and preprocess worker processes.")
def command(workdir: str, shards: int, samples_per_shard: int, documents: int, workers: int):
    """Generate data locally and run the whole pipeline over it (prepare, query, load, tokenize, GPT samples)."""
    from energon_arrow.testing.synthetic import write_webdataset

    _remove_previous_run(workdir)
    root = os.path.join(workdir, "webdataset")
    t_all = time.perf_counter()

    _step(f"generate {shards} WebDataset shards x {samples_per_shard} samples (jpg, txt, json)")
    write_webdataset(root, shards=shards, samples_per_shard=samples_per_shard)
    click.echo(f"wrote {root}/shards/*.tar")

    _step("prepare: energon .nv-meta (index.sqlite, .tar.idx, split.yaml, dataset.yaml) + Parquet side index")
    _run(
        [
            "prepare",
            root,
            "--non-interactive",
            "--split-ratio",
            "8,1,1",
            "--sample-type",
            "CaptioningSample",
            "--field-map",
            '{"image": "jpg", "caption": "txt"}',
            "--no-progress",
            "--num-workers",
            str(workers),
        ]
    )

    _step("info and SQL over the dataset index (embedded DuckDB)")
    _run(["info", root])
    _run(
        [
            "query",
            root,
            "SELECT split, count(*) AS samples, count(DISTINCT shard_id) AS shards "
            "FROM split_samples GROUP BY split ORDER BY split",
        ]
    )
    _run(
        [
            "query",
            root,
            "SELECT part_name, count(*) AS parts, sum(content_size) AS bytes, "
            "avg(content_size)::INT AS mean_bytes FROM parts GROUP BY ALL ORDER BY part_name",
        ]
    )

    _step("load: one training epoch with energon-compatible batches, then save and restore the loader state")
    _load_epoch(root, batch_size=32, workers=workers)

    _step(f"preprocess {documents} JSONL documents into a Megatron token dataset (byte-level tokenizer)")
    corpus = os.path.join(workdir, "corpus.jsonl")
    _write_jsonl(corpus, documents)
    prefix = os.path.join(workdir, "tokens", "corpus")
    _run(
        [
            "preprocess",
            "--input",
            corpus,
            "--output-prefix",
            prefix,
            "--tokenizer",
            "byte",
            "--append-eod",
            "--workers",
            str(workers),
            "--quiet",
        ]
    )
    token_prefix = f"{prefix}_text_document"
    _run(
        [
            "query",
            token_prefix,
            "SELECT count(*) AS documents, sum(tokens) AS tokens, max(tokens) AS longest FROM documents",
        ]
    )

    _step("Nanoset: GPT sample indices identical to Megatron's and a batched read")
    _nanoset(token_prefix, os.path.join(workdir, "nanoset-cache"), seq_length=256, batch=8)

    click.secho(f"\ndemo finished in {time.perf_counter() - t_all:.1f}s; data in {workdir}", bold=True)
