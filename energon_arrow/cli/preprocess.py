"""`energon-arrow preprocess`: JSONL (local/S3, gzip) -> Megatron `{prefix}_{key}_document.bin/.idx`."""

from __future__ import annotations

import json
import os
import time

import click

from energon_arrow.cli.common import storage_options


class _Progress:
    """A live line on stderr: documents, tokens and input MB, with rates."""

    def __init__(self, enabled: bool):
        self.docs = self.tokens = self.bytes = 0
        self.t0 = time.perf_counter()
        self._live = None
        if enabled:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(console=Console(stderr=True), refresh_per_second=4, transient=True)
            self._live.start()

    def __call__(self, docs: int, tokens: int, nbytes: int) -> None:
        self.docs += docs
        self.tokens += tokens
        self.bytes += nbytes
        if self._live is not None:
            dt = max(time.perf_counter() - self.t0, 1e-9)
            self._live.update(
                f"{self.docs:,} docs ({self.docs / dt:,.0f}/s)  {self.tokens:,} tokens ({self.tokens / dt:,.0f}/s)  "
                f"{self.bytes / 1e6:,.1f} MB ({self.bytes / dt / 1e6:,.1f} MB/s)"
            )

    def stop(self) -> None:
        if self._live is not None:
            self._live.stop()


@click.command("preprocess")
@click.option(
    "--input",
    "inputs",
    multiple=True,
    required=True,
    metavar="PATH_OR_GLOB",
    help="JSONL input (repeatable): local path, s3:// URL or glob; .gz or gzip content is decompressed.",
)
@click.option(
    "--output-prefix",
    required=True,
    help="Output prefix (local or s3://); writes PREFIX_KEY_document.bin/.idx.",
)
@click.option(
    "--json-keys",
    multiple=True,
    default=("text",),
    show_default=True,
    help="JSON keys to tokenize (repeatable, or comma-separated: --json-keys text,title).",
)
@click.option(
    "--tokenizer",
    "tokenizer_spec",
    required=True,
    help="'byte', a Hugging Face tokenizer.json (or hf:PATH), or a SentencePiece .model (or sentencepiece:PATH).",
)
@click.option(
    "--eod-token", default=None, help="End-of-document token (default: the tokenizer's EOS/<|endoftext|>)."
)
@click.option(
    "--special-tokens/--no-special-tokens",
    "special_tokens",
    default=None,
    help="Add the tokenizer's special tokens (HF: its post-processor, default on; SentencePiece: BOS, default off).",
)
@click.option(
    "--append-eod", is_flag=True, help="Append the end-of-document token to every non-empty document."
)
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1), help="Worker processes.")
@click.option(
    "--max-documents",
    default=None,
    type=click.IntRange(0),
    help="Stop after this many documents (in input order).",
)
@click.option(
    "--skip-bad-lines", is_flag=True, help="Skip bad JSON lines (counted in the summary) instead of failing."
)
@click.option(
    "--batch-documents",
    default=1024,
    show_default=True,
    type=click.IntRange(1),
    help="Documents per tokenizer batch.",
)
@click.option(
    "--tmp-dir", default=None, help="Local folder for intermediate parts (default: the system temp folder)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--quiet", is_flag=True, help="No progress display.")
@storage_options
def command(
    inputs,
    output_prefix,
    json_keys,
    tokenizer_spec,
    eod_token,
    special_tokens,
    append_eod,
    workers,
    max_documents,
    skip_bad_lines,
    batch_documents,
    tmp_dir,
    as_json,
    quiet,
    storage_options,
):
    """Tokenize JSONL documents into Megatron-Core token datasets (one per JSON key). Runs under torchrun / srun
    too: each rank tokenizes its share of the inputs (--workers processes each) and rank 0 merges one output,
    identical to a single-process run; the output prefix must be on storage every rank reaches."""
    from energon_arrow.tokens.preprocess import PreprocessOptions
    from energon_arrow.tokens.preprocess_dist import preprocess_distributed
    from energon_arrow.tokens.text_tokenizers import TokenizerSpec

    opts = PreprocessOptions(
        tokenizer=TokenizerSpec(tokenizer_spec, eod_token, special_tokens),
        json_keys=tuple(k for item in json_keys for k in item.replace(",", " ").split()),
        append_eod=append_eod,
        workers=workers,
        max_documents=max_documents,
        skip_bad_lines=skip_bad_lines,
        batch_documents=batch_documents,
        tmp_dir=tmp_dir,
        storage_options=storage_options,
    )
    first_rank = os.environ.get("RANK", "0") == "0"  # under torchrun / srun only rank 0 reports
    progress = _Progress(enabled=first_rank and not (as_json or quiet))
    try:  # errors (bad lines, tokenizer) become one line in main, with the traceback under --debug
        summary = preprocess_distributed(list(inputs), output_prefix, opts, progress)
    finally:
        progress.stop()
    if not first_rank:
        return
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    click.echo(
        f"{summary['documents']:,} documents, {summary['tokens']:,} tokens ({summary['dtype']}) from "
        f"{len(summary['inputs'])} file(s), {summary['input_bytes'] / 1e6:,.1f} MB in {summary['seconds']:.1f} s: "
        f"{summary['documents_per_s']:,.0f} docs/s, {summary['tokens_per_s']:,.0f} tokens/s, {summary['mb_per_s']:,.1f} MB/s"
    )
    if summary["bad_lines_skipped"]:
        click.echo(
            f"skipped {summary['bad_lines_skipped']:,} bad line(s); first: {summary['first_bad_line']}"
        )
    for key, out in summary["outputs"].items():
        click.echo(
            f"  {key}: {out['bin_url']} + .idx ({out['documents']:,} documents, {out['tokens']:,} tokens)"
        )
