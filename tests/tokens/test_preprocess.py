"""preprocess: JSONL (plain, gzip, S3) to token datasets; determinism across workers; errors with file:line;
nothing published on failure; the CLI commands."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from energon_arrow.adapters import open_storage
from energon_arrow.tokens.indexed import IndexedTokens
from energon_arrow.tokens.jsonl import BadLineError, expand_inputs, plan_units
from energon_arrow.tokens.preprocess import PreprocessOptions, preprocess, with_eod
from energon_arrow.tokens.text_tokenizers import TokenizerSpec
from tests.tokens.test_tokenizers import hf_tokenizer_json  # noqa: F401 (fixture)


def make_docs(n, seed=0):
    rng = np.random.default_rng(seed)
    words = ["alpha", "beta", "γάμμα", "delta", "", "x" * 30, "\n", "end."]
    return [{"text": " ".join(rng.choice(words, rng.integers(0, 12))), "title": f"t{i}"} for i in range(n)]


def write_jsonl(path, docs, gz=False):
    data = "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return str(path)


def opts(**kw):
    kw.setdefault("tokenizer", TokenizerSpec("byte"))
    return PreprocessOptions(**kw)


def read_docs(prefix, options=None):
    ds = IndexedTokens(prefix, options)
    out = []
    for d in range(ds.num_documents):
        a, b = ds.document_sequences(d)
        out.append([ds[i].tolist() for i in range(a, b)])
    return out


def expected_byte_docs(docs, key="text", eod=True):
    out = []
    for d in docs:
        ids = list(d[key].encode())
        out.append([ids + ([256] if eod else [])] if ids else [])
    return out


def test_byte_documents_with_eod_and_two_keys(tmp_path):
    docs = make_docs(300)
    docs[5]["text"] = ""
    src = write_jsonl(tmp_path / "a.jsonl", docs)
    s = preprocess([src], str(tmp_path / "out/p"), opts(json_keys=("text", "title"), append_eod=True))
    assert s["documents"] == 300 and s["dtype"] == "uint16"
    assert read_docs(tmp_path / "out/p_text_document") == expected_byte_docs(docs)
    assert read_docs(tmp_path / "out/p_title_document") == expected_byte_docs(docs, "title")
    assert read_docs(tmp_path / "out/p_text_document")[5] == []  # empty text: an empty document, no EOD


def test_workers_splits_and_gzip_give_identical_bytes(tmp_path):
    docs = make_docs(2000, seed=1)
    files = [
        write_jsonl(tmp_path / "a.jsonl", docs[:1200]),
        write_jsonl(tmp_path / "b.jsonl.gz", docs[1200:], gz=True),
    ]
    preprocess(files, str(tmp_path / "one"), opts(append_eod=True))
    preprocess(
        files,
        str(tmp_path / "many"),
        opts(append_eod=True, workers=3, min_split_bytes=1000, batch_documents=7),
    )
    for ext in (".bin", ".idx"):
        assert (tmp_path / f"one_text_document{ext}").read_bytes() == (
            tmp_path / f"many_text_document{ext}"
        ).read_bytes()
    assert read_docs(tmp_path / "one_text_document") == expected_byte_docs(docs)


def test_plan_splits_large_file_on_line_boundaries_with_line_numbers(tmp_path):
    src = write_jsonl(tmp_path / "big.jsonl", make_docs(500))
    units = plan_units(expand_inputs([src]), workers=2, min_split_bytes=100)
    assert len(units) == 4
    text = (tmp_path / "big.jsonl").read_bytes()
    for u in units:
        assert u.start == 0 or text[u.start - 1 : u.start] == b"\n"
        assert u.first_line == text[: u.start].count(b"\n") + 1


def test_bad_lines_name_file_and_line(tmp_path):
    docs = make_docs(100)
    lines = [json.dumps(d) for d in docs]
    lines[40] = "{broken"
    lines[60] = json.dumps({"title": "no text"})
    lines[70] = json.dumps({"text": 5})
    (tmp_path / "bad.jsonl").write_text("\n".join(lines) + "\n")
    src = str(tmp_path / "bad.jsonl")
    with pytest.raises(BadLineError, match=r"bad\.jsonl:41: invalid JSON"):
        preprocess([src], str(tmp_path / "o"), opts(workers=2, min_split_bytes=500))
    assert not list(tmp_path.glob("o_*"))  # nothing published
    s = preprocess([src], str(tmp_path / "o"), opts(skip_bad_lines=True))
    assert s["bad_lines_skipped"] == 3 and s["documents"] == 97
    assert "bad.jsonl:41" in s["first_bad_line"]
    (tmp_path / "bad1.jsonl").write_text(
        json.dumps({"text": "ok"}) + "\n\n" + json.dumps({"title": "x"}) + "\n"
    )
    with pytest.raises(BadLineError, match=r"bad1\.jsonl:3: missing key 'text'"):
        preprocess([str(tmp_path / "bad1.jsonl")], str(tmp_path / "o2"), opts())
    (tmp_path / "bad2.jsonl").write_text(json.dumps({"text": 5}) + "\n")
    with pytest.raises(BadLineError, match=r"bad2\.jsonl:1: key 'text' is int, expected a string"):
        preprocess([str(tmp_path / "bad2.jsonl")], str(tmp_path / "o3"), opts())


def test_max_documents_across_files(tmp_path):
    docs = make_docs(100)
    files = [write_jsonl(tmp_path / f"{k}.jsonl", docs[k * 25 : (k + 1) * 25]) for k in range(4)]
    s = preprocess(files, str(tmp_path / "m"), opts(max_documents=60, workers=2))
    assert s["documents"] == 60
    assert read_docs(tmp_path / "m_text_document") == expected_byte_docs(docs[:60], eod=False)
    s = preprocess(files, str(tmp_path / "z"), opts(max_documents=0))
    assert s["documents"] == 0 and read_docs(tmp_path / "z_text_document") == []


def test_hf_tokenizer_documents(tmp_path, hf_tokenizer_json):  # noqa: F811
    from tokenizers import Tokenizer

    ref = Tokenizer.from_file(hf_tokenizer_json)
    docs = make_docs(200, seed=4)
    src = write_jsonl(tmp_path / "h.jsonl", docs)
    preprocess(
        [src],
        str(tmp_path / "h"),
        opts(tokenizer=TokenizerSpec(hf_tokenizer_json), append_eod=True, workers=2),
    )
    eod = ref.token_to_id("<|endoftext|>")
    want = [[ref.encode(d["text"]).ids + [eod]] if ref.encode(d["text"]).ids else [] for d in docs]
    assert read_docs(tmp_path / "h_text_document") == want


def test_with_eod_vectorised():
    ids, lengths = with_eod(np.array([1, 2, 3], np.uint8), np.array([2, 0, 1]), 300)
    assert ids.tolist() == [1, 2, 300, 3, 300] and lengths.tolist() == [3, 0, 2]


@pytest.mark.s3
def test_s3_inputs_and_outputs(tmp_path, s3_root):
    url, options = s3_root
    storage = open_storage(url, options)
    docs = make_docs(150, seed=5)
    storage.write_atomic("in/a.jsonl.gz", gzip.compress("".join(json.dumps(d) + "\n" for d in docs).encode()))
    s = preprocess(
        [storage.url_of("in/*.jsonl.gz")],
        storage.url_of("out/p"),
        opts(append_eod=True, storage_options=options),
    )
    assert s["outputs"]["text"]["bin_url"] == storage.url_of("out/p_text_document.bin")
    assert read_docs(storage.url_of("out/p_text_document"), options) == expected_byte_docs(docs)


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "energon_arrow", *args], capture_output=True, text=True)


@pytest.mark.heavy
def test_cli_preprocess_and_merge(tmp_path):
    docs = make_docs(50)
    src = write_jsonl(tmp_path / "a.jsonl", docs)
    r = run_cli(
        "preprocess",
        "--input",
        src,
        "--output-prefix",
        str(tmp_path / "p1"),
        "--tokenizer",
        "byte",
        "--append-eod",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["documents"] == 50 and summary["outputs"]["text"]["documents"] == 50
    r = run_cli(
        "preprocess",
        "--input",
        src,
        "--output-prefix",
        str(tmp_path / "p2"),
        "--tokenizer",
        "byte",
        "--quiet",
    )
    assert r.returncode == 0 and "50 documents" in r.stdout
    r = run_cli(
        "merge",
        "--input",
        str(tmp_path / "*_document.idx"),
        "--output-prefix",
        str(tmp_path / "all"),
        "--json",
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["documents"] == 100
    assert read_docs(tmp_path / "all") == expected_byte_docs(docs) + expected_byte_docs(docs, eod=False)
    (tmp_path / "bad.jsonl").write_text("{\n")
    r = run_cli(
        "preprocess",
        "--input",
        str(tmp_path / "bad.jsonl"),
        "--output-prefix",
        str(tmp_path / "x"),
        "--tokenizer",
        "byte",
    )
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1].startswith("energon-arrow: error:") and "bad.jsonl:1" in r.stderr
    assert "Traceback" not in r.stderr
    r = run_cli("preprocess", "--input", src, "--output-prefix", str(tmp_path / "y"), "--tokenizer", "nope")
    assert r.returncode == 1 and "unknown tokenizer 'nope'" in r.stderr


def test_a_truncated_gzip_input_names_the_file_and_the_last_good_line(tmp_path):
    from energon_arrow.tokens.jsonl import open_lines

    path = tmp_path / "c.jsonl.gz"
    path.write_bytes(gzip.compress(b"".join(b'{"text": "%d"}\n' % i for i in range(2000)))[:-200])
    (unit,) = plan_units(expand_inputs([str(path)]), workers=1)
    read = []
    with pytest.raises(BadLineError, match=r"c\.jsonl\.gz: cannot read input after line (\d+)") as err:
        for number, _ in open_lines(unit):
            read.append(number)
    assert f"after line {read[-1]}:" in str(err.value)


def test_max_documents_stops_reading_further_inputs(tmp_path):
    files = [write_jsonl(tmp_path / f"f{i}.jsonl", make_docs(30, seed=i)) for i in range(3)]
    (tmp_path / "f3.jsonl").write_text("not json\n")  # never read: the first files hold enough documents
    files.append(str(tmp_path / "f3.jsonl"))
    for workers in (1, 3):
        s = preprocess(files, str(tmp_path / f"m{workers}"), opts(max_documents=40, workers=workers))
        assert s["documents"] == 40
        assert s["input_bytes"] < sum(os.path.getsize(f) for f in files[:3]), workers
